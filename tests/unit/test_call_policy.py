"""The one backend-call policy (farm/inference/policy.py) shared by the agent loop and the gateway: how each
outcome is judged, and how a call walks the backends."""

from __future__ import annotations

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from farm.gateway.upstream_http import UpstreamConnectError, UpstreamProtocolError, UpstreamTimeout
from farm.inference import wire
from farm.inference.errors import (
    BackendRejected,
    BackendUnavailable,
    BadBackendResponse,
    CallDeadlineExceeded,
    ContextOverflow,
    is_context_overflow,
)
from farm.inference.policy import (
    FAILED_FINISHES,
    NORMAL_FINISHES,
    TRANSPORT_ERRORS,
    UNFINISHED_STREAM,
    UNREADABLE_CHUNK,
    Attempts,
    Failure,
    NoBackendWait,
    Step,
    Transport,
    Verdict,
    error_verdict,
    exchange_failure,
    finish_failure,
    finish_verdict,
    status_verdict,
    stream_error_failure,
    transport_failure,
    transport_verdict,
)

OVERFLOW = "This model's maximum context length is 8192 tokens. However, you requested 9000 tokens."


@pytest.mark.parametrize(
    ("status", "message", "verdict"),
    [
        (200, "", Verdict.ok),
        (500, OVERFLOW, Verdict.failover),  # the server's trouble first, whatever it says
        (503, "", Verdict.failover),
        (429, "", Verdict.failover),
        (408, "", Verdict.failover),
        (400, OVERFLOW, Verdict.overflow),
        (413, "prompt is too long", Verdict.overflow),
        (400, "bad top_p", Verdict.rejected),
        (404, "model not found", Verdict.rejected),
    ],
)
def test_status_verdicts(status: int, message: str, verdict: Verdict) -> None:
    assert status_verdict(status, message) is verdict


def test_finish_verdicts() -> None:
    for reason in [None, *NORMAL_FINISHES]:
        assert finish_verdict(reason) is Verdict.ok
    for reason in FAILED_FINISHES:
        assert finish_verdict(reason) is Verdict.failover
    sglang_too_long = "Input length (9000 tokens) exceeds the maximum allowed length (8192 tokens)."
    assert finish_verdict("abort", sglang_too_long) is Verdict.overflow
    assert finish_verdict("eos_token") is Verdict.bad_reply


def test_transport_verdicts() -> None:
    assert transport_verdict(Transport.connect) is Verdict.failover
    assert transport_verdict(Transport.broken) is Verdict.failover
    assert transport_verdict(Transport.deadline) is Verdict.timeout


@pytest.mark.parametrize(
    ("exc", "failure"),
    [
        (httpx.ConnectError("refused"), Transport.connect),
        (httpx.ConnectTimeout("slow connect"), Transport.connect),  # nothing was sent
        (ConnectionRefusedError(), Transport.connect),
        (httpx.ReadTimeout("silent"), Transport.deadline),  # the backend stopped answering
        (httpx.WriteTimeout("stuck"), Transport.deadline),
        (httpx.PoolTimeout("no connection free"), Transport.deadline),
        (UpstreamTimeout("reply body stalled"), Transport.deadline),
        (httpx.RemoteProtocolError("eof"), Transport.broken),
        (httpx.ReadError("reset"), Transport.broken),
        (UpstreamConnectError("refused"), Transport.connect),  # aiohttp's connect error: nothing was sent
        (UpstreamProtocolError("disconnected"), Transport.broken),
        (ValueError("not a transport failure"), None),
    ],
)
def test_transport_failures_of_either_client(exc: BaseException, failure: Transport | None) -> None:
    """httpx (the agent's client) and the gateway's aiohttp client are judged by the one function."""
    assert transport_failure(exc) is failure


# One exception of each way an exchange fails, from either client, and what it means.
EXCHANGE_FAILURES: list[tuple[type[BaseException], Transport]] = [
    (httpx.ConnectError, Transport.connect),
    (httpx.ConnectTimeout, Transport.connect),
    (ConnectionRefusedError, Transport.connect),
    (UpstreamConnectError, Transport.connect),
    (httpx.ReadTimeout, Transport.deadline),
    (UpstreamTimeout, Transport.deadline),
    (TimeoutError, Transport.deadline),
    (httpx.ReadError, Transport.broken),
    (httpx.RemoteProtocolError, Transport.broken),
    (UpstreamProtocolError, Transport.broken),
    (ConnectionResetError, Transport.broken),
]
WORDING = {
    Transport.connect: "is unreachable (",
    Transport.broken: "broke off mid-exchange (",
    Transport.deadline: "stopped answering (",
}


@given(st.sampled_from(EXCHANGE_FAILURES), st.text(max_size=40))
def test_an_exchange_failure_is_judged_and_worded_by_what_it_means(
    case: tuple[type[BaseException], Transport], text: str
) -> None:
    """Unreachable and broken both fail over, a deadline ends the call; the wording tells all three apart
    and keeps the client's own error."""
    cls, meaning = case
    exc = cls(text)
    assert isinstance(exc, TRANSPORT_ERRORS)
    failure = exchange_failure(exc)
    assert failure.verdict is transport_verdict(meaning)
    assert failure.problem == f"{WORDING[meaning]}{cls.__name__}: {exc})"
    assert [w for w in WORDING.values() if failure.problem.startswith(w)] == [WORDING[meaning]]


def test_an_unknown_exchange_failure_reads_as_broken() -> None:
    assert exchange_failure(httpx.DecodingError("bad gzip")).verdict is Verdict.failover
    assert exchange_failure(ValueError("?")).problem.startswith("broke off mid-exchange (ValueError: ?")


def test_finish_failures() -> None:
    """The chat routes' finish reasons: only a dropped request is a failure (an unknown reason passes)."""
    for reason in [None, "eos_token", *NORMAL_FINISHES]:
        assert finish_failure(reason) is None
    assert finish_failure("abort") == Failure(Verdict.failover, "ended the call with finish_reason 'abort'")
    too_long = "Input length (9000 tokens) exceeds the maximum allowed length (8192 tokens)."
    assert finish_failure("abort", too_long) == Failure(
        Verdict.overflow, "ended the call with finish_reason 'abort'", too_long
    )


@given(st.sampled_from(sorted(FAILED_FINISHES)), st.text(max_size=80))
def test_a_dropped_request_is_an_overflow_only_when_it_says_so(reason: str, message: str) -> None:
    failure = finish_failure(reason, message)
    assert failure is not None
    assert failure.verdict is (Verdict.overflow if is_context_overflow(message) else Verdict.failover)
    assert failure.verdict is finish_verdict(reason, message)


@given(st.one_of(st.text(max_size=80), st.sampled_from([OVERFLOW, "engine dead", "prompt is too long"])))
def test_an_error_event_in_a_stream(message: str) -> None:
    """An error in place of a chunk fails over, unless it says the prompt does not fit: then no backend
    can answer it, and the call ends with the backend's words."""
    failure = stream_error_failure(message)
    overflow = is_context_overflow(message)
    assert failure.verdict is (Verdict.overflow if overflow else Verdict.failover)
    assert failure.problem == f"failed mid-stream: {message}" and failure.message == message


def test_the_other_stream_failures() -> None:
    assert UNFINISHED_STREAM.verdict is Verdict.failover  # the backend broke off: another may answer
    assert UNREADABLE_CHUNK.verdict is Verdict.bad_reply  # it answered, broken: never retried


def test_a_token_client_error_carries_its_verdict() -> None:
    assert error_verdict(BackendUnavailable("x")) is Verdict.failover
    assert error_verdict(ContextOverflow("x")) is Verdict.overflow
    assert error_verdict(BackendRejected("x")) is Verdict.rejected
    assert error_verdict(CallDeadlineExceeded("x")) is Verdict.timeout
    assert error_verdict(BadBackendResponse("x")) is Verdict.bad_reply


def test_the_token_wire_raises_what_the_policy_says() -> None:
    """The agent loop's classes are the policy's verdicts: failover = BackendUnavailable."""
    assert isinstance(wire.error_for_status(503, "busy", "b"), BackendUnavailable)
    assert isinstance(wire.error_for_status(413, '{"error": "prompt is too long"}', "b"), ContextOverflow)
    assert isinstance(wire.error_for_status(400, "bad top_p", "b"), BackendRejected)


verdicts = st.sampled_from(list(Verdict))


@given(st.integers(1, 6), st.lists(verdicts, min_size=1, max_size=12))
def test_a_call_walks_the_backends_by_the_policy(max_attempts: int, outcomes: list[Verdict]) -> None:
    """Whatever the backends answer: at most `max_attempts` attempts; only failover moves on; the first
    answer ends the call; any other verdict ends it at once, with nothing marked."""
    attempts = Attempts(max_attempts)
    steps: list[Step] = []
    for verdict in outcomes:
        attempts.begin()
        step = attempts.after(verdict, f"b{attempts.made}", verdict.value)
        steps.append(step)
        if step is not Step.retry:
            break
    assert attempts.made == len(steps) <= max_attempts
    assert all(s is Step.retry for s in steps[:-1])
    last, verdict = steps[-1], outcomes[len(steps) - 1]
    expected = {Verdict.ok: Step.done, Verdict.failover: Step.retry}.get(verdict, Step.fail)
    if verdict is Verdict.failover and attempts.made == max_attempts:
        expected = Step.give_up
    assert last is expected
    failed_over = [v for v in outcomes[: len(steps)] if v is Verdict.failover]
    assert len(attempts.failures) == len(failed_over)
    if last is Step.give_up:
        assert attempts.summary().startswith(f"all {max_attempts} attempts failed; last: b{max_attempts}:")
        with pytest.raises(RuntimeError):
            attempts.begin()


@given(st.integers(1, 6), st.lists(st.tuples(verdicts, st.booleans()), min_size=1, max_size=12))
def test_a_streamed_call_fails_over_only_until_it_has_replied(
    max_attempts: int, outcomes: list[tuple[Verdict, bool]]
) -> None:
    """Each attempt of a stream fails with a verdict, before or after handing part of its reply on. A
    failover before moves on (or gives up) as for a plain call; after, it cuts the call: one backend to
    mark, no other tried. Any other verdict ends the call unmarked, wherever it came."""
    attempts = Attempts(max_attempts)
    steps: list[Step] = []
    for verdict, replied in outcomes:
        attempts.begin()
        steps.append(attempts.after(verdict, f"b{attempts.made}", verdict.value, replied=replied))
        if steps[-1] is not Step.retry:
            break
    verdict, replied = outcomes[len(steps) - 1]
    assert all(s is Step.retry for s in steps[:-1]) and attempts.made == len(steps) <= max_attempts
    if verdict is Verdict.failover:
        plain = Step.retry if attempts.made < max_attempts else Step.give_up
        assert steps[-1] is (Step.cut if replied else plain)
        assert attempts.last_problem == f"b{attempts.made}: failover"
    else:
        assert steps[-1] is (Step.done if verdict is Verdict.ok else Step.fail)
    assert len(attempts.failures) == sum(v is Verdict.failover for v, _ in outcomes[: len(steps)])


def test_a_call_needs_an_attempt() -> None:
    with pytest.raises(ValueError):
        Attempts(0)


@given(st.lists(st.floats(0.0, 5.0), min_size=1, max_size=20))
def test_waiting_for_a_backend_backs_off_within_the_budget(remaining: list[float]) -> None:
    waiting = NoBackendWait()
    previous = 0.0
    for left in remaining:
        wait = waiting.wait_s(left)
        if wait is None:
            assert left <= (waiting.next_s or waiting.first_s)
            continue
        assert wait < left and waiting.first_s <= wait <= waiting.max_s and wait >= previous
        previous = wait
