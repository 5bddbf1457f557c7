"""One policy for a model call across the pool's backends, shared by the agent loop (sync, token-in/token-out)
and the gateway (async, chat): what each outcome of an attempt means, whether another backend is tried,
when the call gives up. Pure logic; the two transports only do the I/O it asks for.

Outcomes (`Verdict`):
- ok: an answer to use.
- failover: the backend's trouble (connect error, broken exchange, 5xx/408/429, finish_reason `abort` or
  `error`): mark it unhealthy, give up the session's pin, try the next backend while attempts are left.
- overflow: prompt plus max_tokens exceed the window (a 4xx or an SGLang abort saying so): never retried.
- rejected: the backend refused the request (any other 4xx): a caller bug or bad config, never retried.
- timeout: the call's time ran out: the job's budget, or the per-read limit (600 s) with the backend
  silent. Neither marked nor retried, by the agent loop and the gateway alike: a non-streamed reply sends
  nothing until it is complete, so a silent backend may be hung or may be generating a long answer, and
  another backend would start the same long generation over (doubling the load that made it slow) while
  marking a busy backend unhealthy would move every session pinned to it off its prefix cache.
- bad_reply: the backend answered but broke the protocol: never trained on, never retried.

A failed attempt is judged into a `Failure` (its verdict and its wording), whatever saw it: a transport
exception (`exchange_failure`), a finish reason (`finish_failure`), an error event or a cut in a streamed
reply (`stream_error_failure`, `UNFINISHED_STREAM`). A streamed reply fails over like any other attempt
until part of it has reached the caller; after that a failover verdict cuts the call (`Step.cut`): the
backend is marked as for a failover, and the caller gets the error in its stream.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

import httpx

from farm.inference.errors import (
    BackendRejected,
    BackendUnavailable,
    BadBackendResponse,
    CallDeadlineExceeded,
    ContextOverflow,
    InferenceError,
    is_context_overflow,
    retryable_status,
)


class Verdict(StrEnum):
    ok = "ok"
    failover = "failover"
    overflow = "overflow"
    rejected = "rejected"
    timeout = "timeout"
    bad_reply = "bad_reply"


TRANSPORT_ERRORS = (httpx.HTTPError, ConnectionError, TimeoutError)
"""Every exception an exchange fails with below HTTP, whichever client made it: httpx, or the gateway's
aiohttp client (farm/gateway/upstream_http.py), whose errors are ConnectionError / TimeoutError."""


class ConnectFailed(ConnectionError):
    """Raised by a client of the farm's own when no connection could be made (refused, unreachable, connect
    timeout): nothing was sent. The gateway's aiohttp client raises it; httpx has its own classes."""


class Transport(StrEnum):
    """How an exchange failed below HTTP."""

    connect = "connect"
    """No connection (refused, unreachable): nothing was sent."""
    broken = "broken"
    """The connection broke or the reply was not HTTP."""
    deadline = "deadline"
    """The call's time ran out (a stalled backend, or the job's budget)."""


def transport_failure(exc: BaseException) -> Transport | None:
    """What an exception of an exchange means below HTTP, whichever client raised it (httpx, or the
    gateway's aiohttp client, whose errors are ConnectionError / TimeoutError); None: not a transport
    failure. A connect timeout is `connect` (nothing was sent); any other timeout, a read or a write
    that waited past its limit, is `deadline`."""
    if isinstance(exc, httpx.ConnectError | httpx.ConnectTimeout | ConnectionRefusedError | ConnectFailed):
        return Transport.connect
    if isinstance(exc, httpx.TimeoutException | TimeoutError):
        return Transport.deadline
    if isinstance(exc, httpx.HTTPError | ConnectionError):
        return Transport.broken
    return None


NORMAL_FINISHES = frozenset({"stop", "length", "repetition", "tool_calls", "function_call", "content_filter"})
"""Finish reasons of a complete answer: vLLM's stop/length/repetition (vllm/v1/engine/__init__.py
FINISH_REASON_STRINGS; repetition detection ends generation normally), SGLang's stop/length, and the chat
routes' tool_calls / function_call / content_filter."""

FAILED_FINISHES = frozenset({"abort", "error"})
"""The engine dropped the request: whatever output came is a fragment, never an answer."""


def status_verdict(status: int, message: str = "") -> Verdict:
    """An HTTP status (with the error's message) from a backend."""
    if status < 400:
        return Verdict.ok
    if retryable_status(status):
        return Verdict.failover
    if is_context_overflow(message):
        return Verdict.overflow
    return Verdict.rejected


def finish_verdict(reason: str | None, message: str = "") -> Verdict:
    """A finish reason (with the abort's message, SGLang's `meta_info.finish_reason.message`); no reason is
    a normal end (a chat reply that did not say)."""
    if reason is None or reason in NORMAL_FINISHES:
        return Verdict.ok
    if reason in FAILED_FINISHES:
        # SGLang aborts a prompt that does not fit before prefill, saying so: retrying cannot help.
        return Verdict.overflow if is_context_overflow(message) else Verdict.failover
    return Verdict.bad_reply


def transport_verdict(failure: Transport) -> Verdict:
    return Verdict.timeout if failure is Transport.deadline else Verdict.failover


@dataclass(frozen=True)
class Failure:
    """A failed attempt, judged."""

    verdict: Verdict
    problem: str
    """What went wrong, worded to follow the backend's address: "{address} {problem}"."""
    message: str = ""
    """The backend's own words, where it gave any (an overflow is answered with them)."""


_TRANSPORT_WORDING = {
    Transport.connect: "is unreachable",
    Transport.broken: "broke off mid-exchange",
    Transport.deadline: "stopped answering",
}


def exchange_failure(exc: BaseException) -> Failure:
    """An exception of an exchange (one of TRANSPORT_ERRORS; any other is read as `broken`): unreachable
    and broken both fail over, a deadline ends the call. The wording tells the three apart."""
    failure = transport_failure(exc) or Transport.broken
    problem = f"{_TRANSPORT_WORDING[failure]} ({type(exc).__name__}: {exc})"
    return Failure(transport_verdict(failure), problem)


def finish_failure(reason: str | None, message: str = "") -> Failure | None:
    """A reply's finish reason, when the engine dropped the request (failover, or overflow when its
    message says so); None: the reply is an answer. An unknown reason passes (the chat routes read it as
    `stop`), unlike `finish_verdict`'s bad_reply for the token routes."""
    verdict = finish_verdict(reason, message)
    if verdict not in (Verdict.failover, Verdict.overflow):
        return None
    return Failure(verdict, f"ended the call with finish_reason {reason!r}", message)


def stream_error_failure(message: str) -> Failure:
    """An error event in a streamed reply (`{"error": ...}` in place of a chunk): the engine failed the call
    as with finish_reason `error`. Its `code` is not read: vLLM's create_streaming_error_response says 400 for
    any failure it did not classify, its engine's own included."""
    return Failure(finish_verdict("error", message), f"failed mid-stream: {message}", message)


UNFINISHED_STREAM = Failure(Verdict.failover, "ended the stream without finishing")
"""The body ended (with or without `[DONE]`) before a chunk said how the reply finished."""

UNREADABLE_CHUNK = Failure(Verdict.bad_reply, "sent a non-JSON chunk")


_VERDICT_OF = {
    BackendUnavailable: Verdict.failover,
    ContextOverflow: Verdict.overflow,
    BackendRejected: Verdict.rejected,
    CallDeadlineExceeded: Verdict.timeout,
    BadBackendResponse: Verdict.bad_reply,
}


def error_verdict(error: InferenceError) -> Verdict:
    """The verdict a token client's error carries (the client raised it by this policy)."""
    for cls, verdict in _VERDICT_OF.items():
        if isinstance(error, cls):
            return verdict
    return Verdict.bad_reply


class Step(StrEnum):
    """What the transport does after an attempt."""

    done = "done"
    """Use the answer."""
    retry = "retry"
    """Mark the backend unhealthy, release the pin, acquire the next backend and call again."""
    give_up = "give_up"
    """Mark the backend unhealthy and fail the call: every attempt failed over."""
    fail = "fail"
    """Fail the call with this attempt's own error (nothing to mark: not the backend's trouble)."""
    cut = "cut"
    """Mark the backend unhealthy and fail the call with this attempt's own error: part of its reply has
    reached the caller already, so no other backend can take the call over."""


@dataclass
class Attempts:
    """The attempts of one model call. `begin()` before each, `after()` with its verdict."""

    max_attempts: int = 3
    made: int = 0
    failures: list[str] = field(default_factory=list)
    """Why each failed-over attempt failed ("backend: problem"), oldest first."""
    registered_version: int | None = None
    """The policy_version the pool had registered for the latest attempt's backend when it was chosen (a
    trace's fallback when the backend does not name its weights)."""

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError("a call needs at least one attempt")

    def begin(self) -> int:
        """Count an attempt; returns its number (1-based)."""
        if self.made >= self.max_attempts:
            raise RuntimeError(f"attempt {self.made + 1} of a call allowed {self.max_attempts}")
        self.made += 1
        return self.made

    def after(self, verdict: Verdict, backend: str = "", problem: str = "", replied: bool = False) -> Step:
        """`replied`: part of this attempt's reply has been handed on to the caller (a stream)."""
        if verdict is Verdict.ok:
            return Step.done
        if verdict is not Verdict.failover:
            return Step.fail
        self.failures.append(f"{backend}: {problem}" if backend else problem)
        if replied:
            return Step.cut
        return Step.retry if self.made < self.max_attempts else Step.give_up

    @property
    def last_problem(self) -> str:
        return self.failures[-1] if self.failures else "no attempt made"

    def summary(self) -> str:
        return f"all {self.made} attempts failed; last: {self.last_problem}"


@dataclass
class NoBackendWait:
    """A caller that may wait for a backend to be registered (a checkpoint swap in progress) backs off
    doubling from `first_s` to `max_s`, while its remaining budget exceeds the next wait."""

    first_s: float = 0.05
    max_s: float = 1.0
    next_s: float = 0.0
    limit_s: float = float("inf")
    """At most this long in all (FARM_NO_BACKEND_WAIT_S), whatever budget the caller has left."""
    waited_s: float = 0.0

    def wait_s(self, remaining_s: float) -> float | None:
        """Seconds to sleep before asking the pool again, or None: give up now."""
        wait = self.next_s or self.first_s
        if remaining_s <= wait or self.waited_s >= self.limit_s:
            return None
        wait = min(wait, max(self.limit_s - self.waited_s, 0.0) or wait)
        self.next_s = min(wait * 2, self.max_s)
        self.waited_s += wait
        return wait
