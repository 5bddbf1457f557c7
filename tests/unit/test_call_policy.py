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
)
from farm.inference.policy import (
    FAILED_FINISHES,
    NORMAL_FINISHES,
    Attempts,
    NoBackendWait,
    Step,
    Transport,
    Verdict,
    error_verdict,
    finish_verdict,
    status_verdict,
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
        (UpstreamConnectError("refused"), Transport.broken),
        (UpstreamProtocolError("disconnected"), Transport.broken),
        (ValueError("not a transport failure"), None),
    ],
)
def test_transport_failures_of_either_client(exc: BaseException, failure: Transport | None) -> None:
    """httpx (the agent's client) and the gateway's aiohttp client are judged by the one function."""
    assert transport_failure(exc) is failure


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
