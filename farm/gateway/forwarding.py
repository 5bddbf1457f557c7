"""Send a normalised request to a pool backend (sticky per session), failing over on infrastructure errors."""

from __future__ import annotations

import asyncio
import json
import time
from collections import OrderedDict
from collections.abc import Awaitable, Coroutine
from typing import Any

import httpx

from farm.gateway.backends import BackendSource
from farm.gateway.errors import ErrorKind, GatewayError
from farm.gateway.normalized import ChatRequest
from farm.gateway.sessions import SessionInfo
from farm.gateway.streaming import UpstreamStream
from farm.gateway.upstream import (
    ForwardResult,
    capture_keys,
    chat_url,
    client_error,
    error_message,
    finish_reason,
    models_url,
    parse_chat_reply,
)
from farm.gateway.upstream_http import UpstreamClient
from farm.inference.policy import (
    TRANSPORT_ERRORS,
    Attempts,
    Failure,
    Step,
    Verdict,
    exchange_failure,
    finish_failure,
    status_verdict,
)
from farm.models import BackendInfo


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
        self._pins = _Pins()
        self._tasks: set[asyncio.Future[None]] = set()

    async def served_model(self, address: str, kind: str = "vllm") -> str | None:
        """The backend's first served model (cached): harnesses send their own names (claude-*, gpt-*)."""
        if address not in self._served:
            try:
                response = await self.http.get(models_url(address, kind), timeout=10.0)
                models = response.json().get("data") or []
                if response.status_code == 200 and models:
                    self._served[address] = str(models[0]["id"])
            except (httpx.HTTPError, ValueError, KeyError, AttributeError):
                return None
        return self._served.get(address)

    async def _model_for(
        self, session: SessionInfo, request: ChatRequest, address: str, kind: str = "vllm"
    ) -> str:
        pinned = session.metadata.get("model")
        if pinned:
            return str(pinned)
        return await self.served_model(address, kind) or request.model

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
        round trip with reading the session). A reply the engine aborted fails over like a 5xx."""
        attempts = Attempts(self.max_attempts)
        upstream_s = 0.0
        while True:
            response, address, spent = await self._send(session, request, first_backend, False, attempts)
            upstream_s += spent
            try:
                data = response.json()
            except json.JSONDecodeError:
                raise GatewayError(ErrorKind.upstream, f"backend {address} sent a non-JSON reply") from None
            failure = finish_failure(finish_reason(data))
            if failure is None:
                reply = parse_chat_reply(data, completion_id)
                return ForwardResult(
                    reply=reply,
                    backend=address,
                    upstream_s=upstream_s,
                    attempts=attempts.made,
                    registered_version=attempts.registered_version,
                )
            await self._failed(attempts, address, failure)

    async def open_stream(
        self, session: SessionInfo, request: ChatRequest, first_backend: BackendInfo | None = None
    ) -> UpstreamStream:
        """The backend's streamed reply, its status checked and its body not yet read (close it). Until it
        hands on its first event the stream fails over by itself (an abort, a broken or failed stream)."""
        attempts = Attempts(self.max_attempts)
        response, address, upstream_s = await self._send(session, request, first_backend, True, attempts)

        async def failed(failure: Failure, address: str, replied: bool) -> tuple[Any, str, float]:
            await self._failed(attempts, address, failure, replied)
            return await self._send(session, request, None, True, attempts)

        def closed(address: str) -> None:
            self._in_background(self.backends.call_finished(address))

        return UpstreamStream(response, address, attempts, upstream_s, on_close=closed, failed=failed)

    async def _send(
        self,
        session: SessionInfo,
        request: ChatRequest,
        first_backend: BackendInfo | None,
        stream: bool,
        attempts: Attempts,
    ) -> tuple[Any, str, float]:
        """The first backend answer below 400, failing over (farm/inference/policy.py) on transport errors,
        5xx, 408 and 429. Returns (response, backend address, seconds spent upstream). A streamed response's
        body is unread and its backend still counted in flight until the stream closes."""
        upstream_s = 0.0
        while True:
            started = time.perf_counter()
            backend, early = await self._choose(session, request, first_backend, stream, attempts.made == 0)
            if backend is None:
                raise GatewayError(ErrorKind.unavailable, "no healthy inference backend is registered")
            attempts.begin()
            attempts.registered_version = backend.policy_version
            address = backend.address.rstrip("/")
            # In-flight bookkeeping overlaps the call instead of adding Redis round trips to it.
            call_started = asyncio.ensure_future(self.backends.call_started(address))
            in_flight = True
            try:
                if early is None:
                    body = await self._body(session, request, backend, stream)
                    started = time.perf_counter()
                    early = self._post(chat_url(address, backend.kind), body, stream)
                response = await early
                if not stream or response.status_code >= 400:
                    in_flight = False
            except TRANSPORT_ERRORS as exc:
                in_flight = False
                # A read timeout (the backend silent for upstream_timeout_s) ends the call, unmarked.
                await self._failed(attempts, address, exchange_failure(exc))
                continue
            finally:
                upstream_s += time.perf_counter() - started
                await call_started
                if not in_flight:
                    self._in_background(self.backends.call_finished(address))
            if response.status_code < 400:
                return response, address, upstream_s
            message = _error_text(response)
            if status_verdict(response.status_code, message) is not Verdict.failover:
                raise client_error(response.status_code, message)
            problem = f"HTTP {response.status_code}: {message[:500]}"
            await self._failed(attempts, address, Failure(Verdict.failover, problem, message))

    async def _choose(
        self,
        session: SessionInfo,
        request: ChatRequest,
        first_backend: BackendInfo | None,
        stream: bool,
        first_try: bool,
    ) -> tuple[BackendInfo | None, Awaitable[Any] | None]:
        """The backend for this attempt, and, on a first try of a session this process has seen, its POST
        already on the way: sent to the remembered pin while the pool's acquire (a Redis round trip, ~0.65 ms
        traced) confirms it. A pin the pool moved meanwhile (failover, removal, a swap) loses its call
        before a byte of it reaches the client."""
        if first_try and first_backend is not None:
            self._pins.remember(session.session_id, first_backend)
            return first_backend, None
        pinned = self._pins.get(session.session_id) if first_try else None
        if pinned is None:
            backend = await self.backends.acquire(session.session_id)
            self._pins.remember(session.session_id, backend)
            return backend, None
        body = await self._body(session, request, pinned, stream)
        early = asyncio.ensure_future(self._post(chat_url(pinned.address, pinned.kind), body, stream))
        try:
            await asyncio.sleep(0)  # the POST goes out first: the acquire's reply is the shorter wait
            backend = await self.backends.acquire(session.session_id)
        except BaseException:
            await _discard(early)
            raise
        self._pins.remember(session.session_id, backend)
        if backend is not None and (backend.address, backend.kind) == (pinned.address, pinned.kind):
            return backend, early
        await _discard(early)
        return backend, None

    async def _body(
        self, session: SessionInfo, request: ChatRequest, backend: BackendInfo, stream: bool
    ) -> dict[str, Any]:
        address = backend.address.rstrip("/")
        model = await self._model_for(session, request, address, backend.kind)
        body = self.upstream_body(session, request, model)
        if stream:
            body["stream"] = True
            body["stream_options"] = {"include_usage": True}
        extra, dropped = capture_keys(backend.kind, stream)
        return {**{k: v for k, v in body.items() if k not in dropped}, **extra}

    async def _failed(
        self, attempts: Attempts, address: str, failure: Failure, replied: bool = False
    ) -> None:
        """An attempt failed: returns when the policy moves the call to the next backend, raises the call's
        error otherwise. A failover marks the backend unhealthy (the pool's acquire then moves the session's
        pin off it), whether or not another attempt follows."""
        step = attempts.after(failure.verdict, address, failure.problem, replied)
        if step is not Step.fail:
            await self.backends.mark_unhealthy(address)
        if step is Step.give_up:
            raise GatewayError(ErrorKind.upstream, attempts.summary())
        if step is not Step.retry:
            raise call_error(address, failure)

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

    async def count_tokens(self, session: SessionInfo, request: ChatRequest) -> tuple[int, bool]:
        """(prompt tokens, exact) via the backend's /tokenize (vLLM), else a bytes/4 estimate."""
        backend = await self.backends.acquire(session.session_id)
        if backend is not None:
            address = backend.address.rstrip("/")
            root = address[: -len("/v1")] if address.endswith("/v1") else address
            body: dict[str, Any] = {
                "model": await self._model_for(session, request, address, backend.kind),
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


_KINDS = {Verdict.timeout: ErrorKind.timeout, Verdict.rejected: ErrorKind.invalid_request}


def call_error(address: str, failure: Failure) -> GatewayError:
    """The call's error when an attempt's failure ends it: a failover cut short, or any other verdict."""
    if failure.verdict is Verdict.overflow:
        return client_error(400, failure.message)
    kind = _KINDS.get(failure.verdict, ErrorKind.upstream)
    return GatewayError(kind, f"backend {address} {failure.problem}")


def _error_text(response: Any) -> str:
    """The error message of a failed backend answer (its body already read)."""
    try:
        data: Any = response.json()
    except json.JSONDecodeError:
        data = None
    return error_message(data, response.text[:500])


class _Pins:
    """The backend each recent session was pinned to by the pool, as this process last heard (bounded)."""

    def __init__(self, size: int = 8192) -> None:
        self.size = size
        self._pins: OrderedDict[str, BackendInfo] = OrderedDict()

    def get(self, session_id: str) -> BackendInfo | None:
        return self._pins.get(session_id)

    def remember(self, session_id: str, backend: BackendInfo | None) -> None:
        if backend is None:
            self._pins.pop(session_id, None)
            return
        self._pins[session_id] = backend
        self._pins.move_to_end(session_id)
        while len(self._pins) > self.size:
            self._pins.popitem(last=False)


async def _discard(call: asyncio.Future[Any]) -> None:
    """Abandon a POST sent ahead: cancelled in flight, or its response closed (its connection dropped)."""
    if not call.done():
        call.cancel()
    await asyncio.wait({call})  # a cancel of the caller itself still propagates
    if not call.cancelled() and call.exception() is None:
        await call.result().aclose()
