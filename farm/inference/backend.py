"""Token-in/token-out clients for one inference backend: `BackendClient` (sync, for Celery workers) and
`AsyncBackendClient` (async). A call is described once (`GenerateCall`: its URL, body, limits, how its
answer is read and what each failure means by farm/inference/policy.py); the two clients only execute it.

A call may carry the job's remaining budget (`budget_s`): it then ends by that time however slowly the
backend answers (a backend dripping a byte a second never trips a per-read timeout). Without data for
the HTTP client's read timeout (600 s by default) a call ends too: a backend that stopped answering is a
timeout by the shared policy, never a failover. The sync client also takes `check`, the job's cheap
interruption check: the call waits in the caller's thread, polling it, while the request runs on a
helper thread, so a cancel interrupts a call in flight within `POLL_S` instead of when the backend
finally answers. Redirects are never followed (httpx's default).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import anyio
import httpx

from farm import tracing
from farm.inference import wire
from farm.inference.errors import BackendUnavailable, BadBackendResponse, CallDeadlineExceeded, InferenceError
from farm.inference.generation import Generation
from farm.inference.policy import Verdict, exchange_failure
from farm.inference.wire import BackendKind

DEFAULT_TIMEOUT = httpx.Timeout(600.0, connect=5.0)
POLL_S = 0.1
"""How often a bounded sync call looks at the job's interruption check."""


@dataclass
class GenerateCall:
    """One generation request: where it goes, what it sends, its limits, how its outcome reads."""

    address: str
    kind: BackendKind
    url: str
    body: dict[str, Any]
    prompt_len: int
    budget_s: float | None
    """The whole call ends by then (CallDeadlineExceeded); None: only the per-read limit bounds it."""
    read_s: float | None
    connect_s: float | None
    started: float = field(default_factory=time.monotonic)

    def left_s(self) -> float | None:
        if self.budget_s is None:
            return None
        return self.budget_s - (time.monotonic() - self.started)

    def timeout(self) -> httpx.Timeout:
        """The HTTP client's own limits, cut to what is left of the budget."""
        read, connect, left = self.read_s, self.connect_s, self.left_s()
        if left is not None:
            left = max(left, 0.001)
            read = left if read is None else min(read, left)
            connect = left if connect is None else min(connect, left)
        return httpx.Timeout(read, connect=connect)

    def answer(self, response: httpx.Response) -> Generation:
        if response.status_code != 200:
            raise wire.error_for_status(response.status_code, response.text, self.address)
        try:
            payload = response.json()
        except ValueError as exc:
            raise BadBackendResponse(f"{self.address} answered non-JSON", backend=self.address) from exc
        latency_s = time.monotonic() - self.started
        return wire.parse(self.kind, payload, self.address, self.prompt_len, latency_s)

    def failed(self, exc: BaseException) -> InferenceError:
        """A transport failure, judged by the shared policy: failover, or the call's time ran out."""
        left = self.left_s()
        if left is not None and left <= 0:
            return self.late()
        failure = exchange_failure(exc)
        message = f"{self.address} {failure.problem}"
        if failure.verdict is Verdict.timeout:
            return CallDeadlineExceeded(message, backend=self.address)
        return BackendUnavailable(message, backend=self.address)

    def late(self) -> CallDeadlineExceeded:
        return CallDeadlineExceeded(
            f"{self.address} did not answer within {self.budget_s or 0.0:.3g} s", backend=self.address
        )


class _Base:
    def __init__(self, address: str, kind: BackendKind, model: str | None, limits: httpx.Timeout) -> None:
        if kind not in ("vllm", "sglang"):
            raise ValueError(f"unknown backend kind {kind!r}")
        self.address = address.rstrip("/")
        self.kind: BackendKind = kind
        self.model = model
        self._limits = limits

    def describe(
        self, prompt_ids: list[int], sampling: Mapping[str, Any], budget_s: float | None
    ) -> GenerateCall:
        url, body = wire.request(self.kind, self.address, prompt_ids, sampling, self.model)
        return GenerateCall(self.address, self.kind, url, body, len(prompt_ids), budget_s,
                            self._limits.read, self._limits.connect)  # fmt: skip


class BackendClient(_Base):
    def __init__(self, address: str, kind: BackendKind = "vllm", http: httpx.Client | None = None,
                 model: str | None = None, policy_version: int | None = None) -> None:  # fmt: skip
        self._owns_http = http is None
        self.http = http if http is not None else httpx.Client(timeout=DEFAULT_TIMEOUT)
        self.policy_version = policy_version
        """The version the pool registered for this backend (for the call's trace span)."""
        super().__init__(address, kind, model, self.http.timeout)

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
        attributes = {
            "farm.llm.backend": self.address,
            "farm.llm.kind": self.kind,
            "farm.llm.prompt_tokens": len(prompt_ids),
            "farm.policy_version": self.policy_version,
        }
        with tracing.call_span("llm.generate", attributes) as record:
            generation = self._generate(prompt_ids, sampling, budget_s, check)
            record(**{"farm.llm.completion_tokens": len(generation.token_ids),
                      "farm.llm.finish_reason": generation.finish_reason,
                      "farm.llm.weight_version": generation.weight_version})  # fmt: skip
            return generation

    def _generate(
        self,
        prompt_ids: list[int],
        sampling: Mapping[str, Any],
        budget_s: float | None,
        check: Callable[[], None] | None,
    ) -> Generation:
        call = self.describe(prompt_ids, sampling, budget_s)
        if budget_s is None and check is None:
            try:
                response = self.http.post(call.url, json=call.body, timeout=call.timeout())
            except httpx.HTTPError as exc:
                raise call.failed(exc) from exc
            return call.answer(response)
        outcome = _BoundedCall(self.http, call).wait(check)
        if outcome is None:
            raise call.late()
        if isinstance(outcome, httpx.HTTPError):
            raise call.failed(outcome) from outcome
        return call.answer(outcome)

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

    def __init__(self, http: httpx.Client, call: GenerateCall) -> None:
        left = call.left_s()
        self.deadline = None if left is None else time.monotonic() + left
        self.abandoned = threading.Event()
        self.done = threading.Event()
        self.outcome: httpx.Response | httpx.HTTPError | None = None
        threading.Thread(target=self._run, args=(http, call), name="backend-call", daemon=True).start()

    def _late(self) -> bool:
        return self.deadline is not None and time.monotonic() > self.deadline

    def _run(self, http: httpx.Client, call: GenerateCall) -> None:
        try:
            with http.stream("POST", call.url, json=call.body, timeout=call.timeout()) as response:
                chunks = []
                for chunk in response.iter_raw():  # still encoded: the Response below decodes it
                    if self.abandoned.is_set() or self._late():
                        return
                    chunks.append(chunk)
            self.outcome = httpx.Response(
                response.status_code,
                headers=response.headers,
                content=b"".join(chunks),
                request=response.request,
            )
        except httpx.HTTPError as exc:
            self.outcome = None if self._late() else exc
        finally:
            self.done.set()

    def wait(self, check: Callable[[], None] | None) -> httpx.Response | httpx.HTTPError | None:
        """The response, the transport error, or None when the deadline passed first."""
        try:
            while not self.done.wait(self._poll_s()):
                if check is not None:
                    check()
                if self._late():
                    return None
        finally:
            self.abandoned.set()
        return self.outcome

    def _poll_s(self) -> float:
        if self.deadline is None:
            return POLL_S
        return min(POLL_S, max(self.deadline - time.monotonic(), 0.0))


class AsyncBackendClient(_Base):
    def __init__(self, address: str, kind: BackendKind = "vllm", http: httpx.AsyncClient | None = None,
                 model: str | None = None) -> None:  # fmt: skip
        self._owns_http = http is None
        self.http = http if http is not None else httpx.AsyncClient(timeout=DEFAULT_TIMEOUT)
        super().__init__(address, kind, model, self.http.timeout)

    async def generate(
        self, prompt_ids: list[int], sampling: Mapping[str, Any], *, budget_s: float | None = None
    ) -> Generation:
        """`budget_s`: the whole call (connect, wait, every byte) ends by then. Task cancellation
        interrupts it at once."""
        call = self.describe(prompt_ids, sampling, budget_s)
        try:
            with anyio.fail_after(None if budget_s is None else max(budget_s, 0.0)):
                response = await self.http.post(call.url, json=call.body, timeout=call.timeout())
        except TimeoutError:
            raise call.late() from None
        except httpx.HTTPError as exc:
            raise call.failed(exc) from exc
        return call.answer(response)

    async def aclose(self) -> None:
        if self._owns_http:
            await self.http.aclose()

    async def __aenter__(self) -> AsyncBackendClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
