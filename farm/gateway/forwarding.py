"""Send a normalised request to a pool backend (sticky per session), failing over on infrastructure errors."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Coroutine
from dataclasses import dataclass
from typing import Any

import httpx

from farm.gateway.backends import BackendSource
from farm.gateway.errors import ErrorKind, GatewayError
from farm.gateway.normalized import ChatRequest
from farm.gateway.sessions import SessionInfo
from farm.gateway.streaming import UpstreamStream
from farm.gateway.upstream import (
    UpstreamReply,
    capture_keys,
    chat_url,
    client_error,
    error_message,
    parse_chat_reply,
)
from farm.gateway.upstream_http import (
    UpstreamClient,
    UpstreamConnectError,
    UpstreamProtocolError,
    UpstreamTimeout,
)
from farm.inference.errors import retryable_status
from farm.models import BackendInfo

# Transport failures after which another backend is tried (the request never produced a completion).
_RETRYABLE = (
    httpx.ConnectError,
    httpx.ConnectTimeout,
    httpx.RemoteProtocolError,
    httpx.ReadError,
    httpx.WriteError,
    UpstreamConnectError,
    UpstreamProtocolError,
)
_TIMEOUTS = (httpx.TimeoutException, UpstreamTimeout)


@dataclass
class ForwardResult:
    reply: UpstreamReply
    backend: str
    upstream_s: float
    attempts: int


class Forwarder:
    def __init__(
        self,
        backends: BackendSource,
        http: httpx.AsyncClient,
        max_attempts: int = 3,
        fast: UpstreamClient | None = None,
    ) -> None:
        self.backends = backends
        self.http = http
        self.fast = fast
        """The hot call's client (plain http:// backends); httpx for everything else."""
        self.max_attempts = max_attempts
        self._served: dict[str, str] = {}
        self._tasks: set[asyncio.Future[None]] = set()

    async def served_model(self, address: str) -> str | None:
        """The backend's first served model (cached): harnesses send their own names (claude-*, gpt-*)."""
        if address not in self._served:
            try:
                response = await self.http.get(f"{address}/models", timeout=10.0)
                models = response.json().get("data") or []
                if response.status_code == 200 and models:
                    self._served[address] = str(models[0]["id"])
            except (httpx.HTTPError, ValueError, KeyError, AttributeError):
                return None
        return self._served.get(address)

    async def _model_for(self, session: SessionInfo, request: ChatRequest, address: str) -> str:
        pinned = session.metadata.get("model")
        if pinned:
            return str(pinned)
        return await self.served_model(address) or request.model

    def upstream_body(self, session: SessionInfo, request: ChatRequest, model: str) -> dict[str, Any]:
        body = request.upstream_body(model)
        # The trainer's sampling parameters win over the harness's (policy sampling must be controlled).
        overrides = session.metadata.get("sampling_params") or {}
        body.update({k: v for k, v in overrides.items() if v is not None})
        return body

    async def complete(
        self,
        session: SessionInfo,
        request: ChatRequest,
        completion_id: str,
        first_backend: BackendInfo | None = None,
    ) -> ForwardResult:
        """`first_backend`: the session's backend when the caller acquired it already (overlapping that
        round trip with reading the session)."""
        response, address, attempts, upstream_s = await self._send(session, request, first_backend, False)
        try:
            data = response.json()
        except json.JSONDecodeError:
            raise GatewayError(ErrorKind.upstream, f"backend {address} sent a non-JSON reply") from None
        reply = parse_chat_reply(data, completion_id)
        return ForwardResult(reply=reply, backend=address, upstream_s=upstream_s, attempts=attempts)

    async def open_stream(
        self, session: SessionInfo, request: ChatRequest, first_backend: BackendInfo | None = None
    ) -> UpstreamStream:
        """The backend's streamed reply, its status checked and its body not yet read (close it)."""
        response, address, attempts, upstream_s = await self._send(session, request, first_backend, True)
        return UpstreamStream(
            response,
            address,
            attempts,
            upstream_s,
            on_close=lambda: self._in_background(self.backends.call_finished(address)),
        )

    async def _send(
        self, session: SessionInfo, request: ChatRequest, first_backend: BackendInfo | None, stream: bool
    ) -> tuple[httpx.Response, str, int, float]:
        """The first backend answer below 400, failing over on transport errors and 5xx.

        Returns (response, backend address, attempts, seconds spent upstream). A streamed response's body is
        unread and its backend still counted in flight until the stream closes.
        """
        last_problem = "no attempt made"
        upstream_s = 0.0
        for attempt in range(1, self.max_attempts + 1):
            if attempt == 1 and first_backend is not None:
                backend: BackendInfo | None = first_backend
            else:
                backend = await self.backends.acquire(session.session_id)
            if backend is None:
                raise GatewayError(ErrorKind.unavailable, "no healthy inference backend is registered")
            address = backend.address.rstrip("/")
            body = self.upstream_body(session, request, await self._model_for(session, request, address))
            if stream:
                body["stream"] = True
                body["stream_options"] = {"include_usage": True}
            extra, dropped = capture_keys(backend.kind, stream)
            body = {**{k: v for k, v in body.items() if k not in dropped}, **extra}
            # In-flight bookkeeping overlaps the call instead of adding Redis round trips to it.
            call_started = asyncio.ensure_future(self.backends.call_started(address))
            started = time.perf_counter()
            in_flight = True
            try:
                response = await self._post(chat_url(address, backend.kind), body, stream)
                if not stream or response.status_code >= 400:
                    in_flight = False
            except _RETRYABLE as exc:
                in_flight = False
                last_problem = f"{address}: {type(exc).__name__}: {exc}"
                await self._fail_over(session, address)
                continue
            except _TIMEOUTS as exc:
                in_flight = False
                raise GatewayError(ErrorKind.timeout, f"backend {address} timed out: {exc}") from exc
            finally:
                upstream_s += time.perf_counter() - started
                await call_started
                if not in_flight:
                    self._in_background(self.backends.call_finished(address))
            if retryable_status(response.status_code):  # the one classifier (farm/inference/errors.py)
                last_problem = f"{address}: HTTP {response.status_code}: {response.text[:500]}"
                await self._fail_over(session, address)
                continue
            if response.status_code >= 400:
                try:
                    data: Any = response.json()
                except json.JSONDecodeError:
                    data = None
                raise client_error(response.status_code, error_message(data, response.text[:500]))
            return response, address, attempt, upstream_s
        raise GatewayError(
            ErrorKind.upstream, f"all {self.max_attempts} attempts failed; last: {last_problem}"
        )

    async def _post(self, url: str, body: dict[str, Any], stream: bool) -> Any:
        """The backend's reply (an `upstream_http.Response`, or an httpx one for https), its body read
        unless it is a stream that succeeded."""
        response: Any
        if self.fast is not None and url.startswith("http://"):
            response = await self.fast.post_json(url, body)
        else:
            response = await self.http.send(self.http.build_request("POST", url, json=body), stream=stream)
        if not stream or response.status_code >= 400:
            await response.aread()
            await response.aclose()
        return response

    def _in_background(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _fail_over(self, session: SessionInfo, address: str) -> None:
        await self.backends.mark_unhealthy(address)
        await self.backends.release(session.session_id)

    async def count_tokens(self, session: SessionInfo, request: ChatRequest) -> tuple[int, bool]:
        """(prompt tokens, exact) via the backend's /tokenize (vLLM), else a bytes/4 estimate."""
        backend = await self.backends.acquire(session.session_id)
        if backend is not None:
            address = backend.address.rstrip("/")
            root = address[: -len("/v1")] if address.endswith("/v1") else address
            body: dict[str, Any] = {
                "model": await self._model_for(session, request, address),
                "messages": request.messages,
                "add_generation_prompt": True,
            }
            if request.tools:
                body["tools"] = request.tools
            for url in (f"{root}/tokenize", f"{address}/tokenize"):
                try:
                    response = await self.http.post(url, json=body, timeout=30.0)
                    if response.status_code == 200 and "count" in response.json():
                        return int(response.json()["count"]), True
                except (httpx.HTTPError, ValueError):
                    continue
        size = len(json.dumps([request.messages, request.tools], ensure_ascii=False).encode())
        return max(1, size // 4), False
