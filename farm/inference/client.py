"""Token-in/token-out clients for one inference backend: `BackendClient` (sync, for Celery workers) and
`AsyncBackendClient` (for the gateway). Both map transport failures onto farm.inference.errors.

A call may carry the job's remaining budget (`budget_s`): it then ends by that time however slowly the
backend answers (a backend dripping a byte a second never trips a per-read timeout). The sync client
also takes `check`, the job's cheap interruption check: the call waits in the caller's thread, polling
it, while the request runs on a helper thread, so a cancel interrupts a call in flight within
`POLL_S` instead of when the backend finally answers. Redirects are never followed (httpx's default).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from typing import Any

import anyio
import httpx

from farm.inference import wire
from farm.inference.errors import BackendUnavailable, BadBackendResponse, CallDeadlineExceeded
from farm.inference.generation import Generation
from farm.inference.wire import BackendKind

DEFAULT_TIMEOUT = httpx.Timeout(600.0, connect=5.0)
POLL_S = 0.1
"""How often a bounded sync call looks at the job's interruption check."""


class _Base:
    def __init__(self, address: str, kind: BackendKind = "vllm", model: str | None = None) -> None:
        if kind not in ("vllm", "sglang"):
            raise ValueError(f"unknown backend kind {kind!r}")
        self.address = address.rstrip("/")
        self.kind: BackendKind = kind
        self.model = model

    def _request(self, prompt_ids: list[int], sampling: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
        return wire.request(self.kind, self.address, prompt_ids, sampling, self.model)

    def _answer(self, response: httpx.Response, prompt_len: int, started: float) -> Generation:
        if response.status_code != 200:
            raise wire.error_for_status(response.status_code, response.text, self.address)
        try:
            payload = response.json()
        except ValueError as exc:
            raise BadBackendResponse(f"{self.address} answered non-JSON", backend=self.address) from exc
        return wire.parse(self.kind, payload, self.address, prompt_len, time.perf_counter() - started)

    def _unavailable(self, exc: httpx.HTTPError) -> BackendUnavailable:
        return BackendUnavailable(f"{self.address}: {type(exc).__name__}: {exc}", backend=self.address)

    def _late(self, budget_s: float) -> CallDeadlineExceeded:
        return CallDeadlineExceeded(
            f"{self.address} did not answer within {budget_s:.3g} s", backend=self.address
        )


def _timeout(budget_s: float) -> httpx.Timeout:
    budget_s = max(budget_s, 0.001)
    return httpx.Timeout(min(budget_s, 600.0), connect=min(budget_s, 5.0))


class BackendClient(_Base):
    def __init__(self, address: str, kind: BackendKind = "vllm", http: httpx.Client | None = None,
                 model: str | None = None) -> None:  # fmt: skip
        super().__init__(address, kind, model)
        self._owns_http = http is None
        self.http = http if http is not None else httpx.Client(timeout=DEFAULT_TIMEOUT)

    def generate(
        self,
        prompt_ids: list[int],
        sampling: Mapping[str, Any],
        *,
        budget_s: float | None = None,
        check: Callable[[], None] | None = None,
    ) -> Generation:
        """`budget_s`: the call ends by then (CallDeadlineExceeded). `check`: raises to abandon the call
        (a cancel, a lost lease); polled every POLL_S while the call is in flight."""
        url, body = self._request(prompt_ids, sampling)
        started = time.perf_counter()
        if budget_s is None and check is None:
            try:
                response = self.http.post(url, json=body)
            except httpx.HTTPError as exc:
                raise self._unavailable(exc) from exc
            return self._answer(response, len(prompt_ids), started)
        budget = 600.0 if budget_s is None else budget_s
        outcome = _BoundedCall(self.http, url, body, time.monotonic() + budget).wait(check)
        if isinstance(outcome, httpx.HTTPError):
            raise self._unavailable(outcome) from outcome
        if outcome is None:
            raise self._late(budget)
        return self._answer(outcome, len(prompt_ids), started)

    def close(self) -> None:
        if self._owns_http:
            self.http.close()

    def __enter__(self) -> BackendClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _BoundedCall:
    """One POST on a helper thread, read chunk by chunk until the deadline; the caller's thread waits,
    polling `check`. An abandoned call stops at its next chunk, or at the latest when its read timeout
    (the budget) expires: a daemon thread that owns nothing the job needs."""

    def __init__(self, http: httpx.Client, url: str, body: dict[str, Any], deadline: float) -> None:
        self.deadline = deadline
        self.abandoned = threading.Event()
        self.done = threading.Event()
        self.outcome: httpx.Response | httpx.HTTPError | None = None
        threading.Thread(target=self._run, args=(http, url, body), name="backend-call", daemon=True).start()

    def _run(self, http: httpx.Client, url: str, body: dict[str, Any]) -> None:
        try:
            timeout = _timeout(self.deadline - time.monotonic())
            with http.stream("POST", url, json=body, timeout=timeout) as response:
                chunks = []
                for chunk in response.iter_raw():  # still encoded: the Response below decodes it
                    if self.abandoned.is_set() or time.monotonic() > self.deadline:
                        return
                    chunks.append(chunk)
            self.outcome = httpx.Response(
                response.status_code,
                headers=response.headers,
                content=b"".join(chunks),
                request=response.request,
            )
        except httpx.HTTPError as exc:
            self.outcome = None if time.monotonic() > self.deadline else exc
        finally:
            self.done.set()

    def wait(self, check: Callable[[], None] | None) -> httpx.Response | httpx.HTTPError | None:
        """The response, the transport error, or None when the deadline passed first."""
        try:
            while not self.done.wait(min(POLL_S, max(self.deadline - time.monotonic(), 0.0))):
                if check is not None:
                    check()
                if time.monotonic() >= self.deadline:
                    return None
        finally:
            self.abandoned.set()
        return self.outcome


class AsyncBackendClient(_Base):
    def __init__(self, address: str, kind: BackendKind = "vllm", http: httpx.AsyncClient | None = None,
                 model: str | None = None) -> None:  # fmt: skip
        super().__init__(address, kind, model)
        self._owns_http = http is None
        self.http = http if http is not None else httpx.AsyncClient(timeout=DEFAULT_TIMEOUT)

    async def generate(
        self, prompt_ids: list[int], sampling: Mapping[str, Any], *, budget_s: float | None = None
    ) -> Generation:
        """`budget_s`: the whole call (connect, wait, every byte) ends by then. Task cancellation
        interrupts it at once."""
        url, body = self._request(prompt_ids, sampling)
        started = time.perf_counter()
        try:
            if budget_s is None:
                response = await self.http.post(url, json=body)
            else:
                with anyio.fail_after(max(budget_s, 0.0)):
                    response = await self.http.post(url, json=body, timeout=_timeout(budget_s))
        except TimeoutError:
            raise self._late(budget_s or 0.0) from None
        except httpx.HTTPError as exc:
            if budget_s is not None and isinstance(exc, httpx.TimeoutException):
                raise self._late(budget_s) from exc
            raise self._unavailable(exc) from exc
        return self._answer(response, len(prompt_ids), started)

    async def aclose(self) -> None:
        if self._owns_http:
            await self.http.aclose()

    async def __aenter__(self) -> AsyncBackendClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
