"""A backend that breaks the protocol, drips, hangs or redirects: a classified error, in time, judged alike by
the agent loop's client and the gateway's forwarder."""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis
from hypothesis import given
from hypothesis import strategies as st

from farm.agent.model_client import PolicyClient
from farm.errors import JobCancelled, JobDeadlineExceeded
from farm.gateway.backends import StaticBackends
from farm.gateway.errors import ErrorKind, GatewayError
from farm.gateway.forwarding import Forwarder
from farm.gateway.normalized import ChatRequest
from farm.gateway.sessions import SessionInfo
from farm.gateway.upstream_http import UpstreamClient
from farm.inference import wire
from farm.inference.backend import AsyncBackendClient, BackendClient
from farm.inference.errors import BackendRejected, BadBackendResponse, CallDeadlineExceeded, InferenceError
from farm.inference.generation import Generation
from farm.pool import BackendPool
from tests.api.backend_server import GOOD, MisbehavingBackend
from tests.waiting import wait_until


def _choice(**changes: Any) -> dict[str, Any]:
    return {**GOOD, "choices": [{**GOOD["choices"][0], **changes}]}


BROKEN = {
    "choices-a-string": {"choices": "lol"},
    "choices-empty": {"choices": []},
    "choices-of-strings": {"choices": ["lol"]},
    "no-ids": _choice(token_ids=None, logprobs={"token_logprobs": [-0.1]}),
    "fewer-logprobs": _choice(logprobs={"tokens": ["token_id:5", "token_id:6"], "token_logprobs": [-0.1]}),
    "string-ids": _choice(token_ids=["5", "x"]),
    "negative-id": _choice(token_ids=[5, -6]),
    "bool-logprob": _choice(logprobs={"token_logprobs": [True, -0.2]}),
    "logprobs-a-list": _choice(logprobs=[1, 2]),
    "usage-a-list": {**GOOD, "usage": [1]},
    "unknown-finish": _choice(finish_reason="exploded"),
    "a-list": [GOOD],
    "null": None,
    "a-number": 7,
}


@pytest.fixture(scope="module")
def backend() -> Iterator[MisbehavingBackend]:
    with MisbehavingBackend() as server:
        yield server


@pytest.fixture(autouse=True)
def _reset(backend: MisbehavingBackend) -> None:
    backend.behaviour.__init__()  # type: ignore[misc]


def test_a_good_reply_still_parses(backend: MisbehavingBackend) -> None:
    backend.behaviour.reply = GOOD
    with BackendClient(backend.url) as client:
        assert client.generate([1, 2, 3], {}).token_ids == [5, 6]
        assert client.generate([1, 2, 3], {}, budget_s=5, check=lambda: None).logprobs == [-0.1, -0.2]


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_protocol_breaks_are_bad_backend_responses(backend: MisbehavingBackend, name: str) -> None:
    backend.behaviour.reply = BROKEN[name]
    with BackendClient(backend.url) as client:
        with pytest.raises(BadBackendResponse):
            client.generate([1], {})
        with pytest.raises(BadBackendResponse):
            client.generate([1], {}, budget_s=5, check=lambda: None)

    async def run_async() -> None:
        async with AsyncBackendClient(backend.url) as client:
            with pytest.raises(BadBackendResponse):
                await client.generate([1], {}, budget_s=5)

    asyncio.run(run_async())


def test_non_finite_logprobs_are_refused() -> None:
    raw = json.dumps(_choice(logprobs={"token_logprobs": [float("nan"), float("inf")]}))
    with pytest.raises(BadBackendResponse, match="finite"):
        wire.parse("vllm", json.loads(raw), "b", 1, 0.0)
    sglang = {
        "output_ids": [1],
        "meta_info": {"output_token_logprobs": [[0.0, 1e400]], "finish_reason": "stop"},
    }
    with pytest.raises(BadBackendResponse):
        wire.parse("sglang", sglang, "b", 1, 0.0)


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=12,
)
_keys = st.sampled_from(["choices", "token_ids", "logprobs", "token_logprobs", "tokens", "finish_reason",
                         "meta_info", "output_ids", "output_token_logprobs", "usage", "text"])  # fmt: skip
_shaped = st.recursive(
    _json,
    lambda inner: st.dictionaries(_keys, inner, max_size=5) | st.lists(inner, max_size=2),
    max_leaves=15,
)


@given(_shaped, st.sampled_from(["vllm", "sglang"]))
def test_any_json_parses_or_is_classified(payload: object, kind: str) -> None:
    try:
        generation = wire.parse(kind, payload, "b", 1, 0.0)  # type: ignore[arg-type]
    except InferenceError:
        return
    assert isinstance(generation, Generation) and len(generation.token_ids) == len(generation.logprobs)


def test_a_dripping_backend_cannot_outlive_the_budget(backend: MisbehavingBackend) -> None:
    backend.behaviour.mode, backend.behaviour.reply, backend.behaviour.drip_s = "drip", GOOD, 0.05
    with BackendClient(backend.url) as client:
        started = time.monotonic()
        with pytest.raises(CallDeadlineExceeded):
            client.generate([1], {}, budget_s=1.0)  # the whole reply would take ~15 s
        assert time.monotonic() - started < 1.5

    async def run_async() -> float:
        async with AsyncBackendClient(backend.url) as client:
            started = time.monotonic()
            with pytest.raises(CallDeadlineExceeded):
                await client.generate([1], {}, budget_s=1.0)
            return time.monotonic() - started

    assert asyncio.run(run_async()) < 1.5


def test_a_hanging_backend_cannot_outlive_the_budget(backend: MisbehavingBackend) -> None:
    backend.behaviour.mode = "hang"
    with BackendClient(backend.url) as client:
        started = time.monotonic()
        with pytest.raises(CallDeadlineExceeded):
            client.generate([1], {}, budget_s=0.7)
        assert time.monotonic() - started < 1.2


@pytest.mark.parametrize("mode", ["drip", "hang"])
def test_cancel_interrupts_a_call_in_flight_within_a_second(backend: MisbehavingBackend, mode: str) -> None:
    backend.behaviour.mode, backend.behaviour.reply, backend.behaviour.drip_s = mode, GOOD, 0.2
    cancelled = threading.Event()

    def check() -> None:
        if cancelled.is_set():
            raise JobCancelled("cancelled")

    fired: list[float] = []

    def cancel_in_flight() -> None:
        wait_until(lambda: backend.behaviour.open_calls > 0, 10, what="the call in flight")
        fired.append(time.monotonic())
        cancelled.set()

    threading.Thread(target=cancel_in_flight, daemon=True).start()
    with BackendClient(backend.url) as client, pytest.raises(JobCancelled):
        client.generate([1], {}, budget_s=60, check=check)  # the budget is not what ends it
    assert time.monotonic() - fired[0] < 1.0
    # the abandoned call lets go of the backend too (at its next chunk; a hang ends with the budget)
    if mode == "drip":
        calls = backend.behaviour
        wait_until(lambda: calls.open_calls, 2, accept=lambda n: n == 0, what="no open call")


def test_redirects_are_never_followed(backend: MisbehavingBackend) -> None:
    with MisbehavingBackend() as elsewhere:
        elsewhere.behaviour.reply = GOOD
        backend.behaviour.mode, backend.behaviour.to = "redirect", f"{elsewhere.url}/completions"
        with BackendClient(backend.url) as client:
            with pytest.raises(BackendRejected, match="307"):
                client.generate([1], {})
            with pytest.raises(BackendRejected, match="307"):
                client.generate([1], {}, budget_s=5, check=lambda: None)
        assert elsewhere.behaviour.calls == 0
    assert httpx.Client().follow_redirects is False


# A backend that stops answering: one rule (farm/inference/policy.py) for the agent loop and the gateway.
# The per-read limit runs out with the job's budget still left: a timeout, never a failover; nothing is
# marked unhealthy and no second backend is asked (it would start the same long generation over).

SILENT_READ_S = 0.5


@pytest.fixture
def healthy() -> Iterator[MisbehavingBackend]:
    with MisbehavingBackend() as server:
        server.behaviour.reply = GOOD
        yield server


def _pool_pinned_to(silent: MisbehavingBackend, other: MisbehavingBackend, redis_url: str) -> BackendPool:
    pool = BackendPool(redis.Redis.from_url(redis_url))
    pool.add(silent.url)
    backend = pool.acquire("job")
    assert backend is not None and backend.address == silent.url
    pool.add(other.url)
    return pool


def test_a_silent_backend_is_a_timeout_for_the_agent_loop(
    backend: MisbehavingBackend, healthy: MisbehavingBackend, redis_url: str
) -> None:
    backend.behaviour.mode = "hang"
    pool = _pool_pinned_to(backend, healthy, redis_url)
    with httpx.Client(timeout=httpx.Timeout(SILENT_READ_S, connect=5.0)) as http:
        policy = PolicyClient(pool, "job", check=lambda: None, remaining=lambda: 60.0, http=http)
        started = time.monotonic()
        with pytest.raises(CallDeadlineExceeded, match="stopped answering"):
            policy.generate([1], {})
        assert time.monotonic() - started < SILENT_READ_S + 2.0
    assert healthy.behaviour.calls == 0
    assert all(b.healthy for b in pool.list())


def test_both_token_clients_call_a_silent_backend_a_timeout(backend: MisbehavingBackend) -> None:
    """Without a budget too: the per-read limit of the client's HTTP pool ends the call, as a timeout."""
    backend.behaviour.mode = "hang"
    limits = httpx.Timeout(SILENT_READ_S, connect=5.0)
    with httpx.Client(timeout=limits) as http, pytest.raises(CallDeadlineExceeded, match="stopped answering"):
        BackendClient(backend.url, http=http).generate([1], {})

    async def run_async() -> None:
        async with httpx.AsyncClient(timeout=limits) as http:
            with pytest.raises(CallDeadlineExceeded, match="stopped answering"):
                await AsyncBackendClient(backend.url, http=http).generate([1], {})

    asyncio.run(run_async())


def test_a_spent_budget_ends_the_agent_loop_as_a_job_timeout(
    backend: MisbehavingBackend, healthy: MisbehavingBackend, redis_url: str
) -> None:
    backend.behaviour.mode = "hang"
    pool = _pool_pinned_to(backend, healthy, redis_url)
    deadline = time.monotonic() + 0.5

    def check() -> None:
        if time.monotonic() >= deadline:
            raise JobDeadlineExceeded("spent")

    policy = PolicyClient(pool, "job", check, remaining=lambda: deadline - time.monotonic())
    with pytest.raises(JobDeadlineExceeded):
        policy.generate([1], {})
    assert healthy.behaviour.calls == 0
    assert all(b.healthy for b in pool.list())


@pytest.mark.parametrize("client", ["aiohttp", "httpx"])
def test_a_silent_backend_is_a_timeout_for_the_gateway(
    backend: MisbehavingBackend, healthy: MisbehavingBackend, client: str
) -> None:
    backend.behaviour.mode = "hang"
    backends = StaticBackends([backend.url, healthy.url])  # a new session goes to the first
    session = SessionInfo(session_id="s", created_at=0.0, metadata={"model": "m"})
    request = ChatRequest(messages=[{"role": "user", "content": "hi"}], sampling={"max_tokens": 8})

    async def call() -> GatewayError:
        limits = httpx.Timeout(SILENT_READ_S, connect=5.0)
        fast = UpstreamClient(read_timeout=SILENT_READ_S) if client == "aiohttp" else None
        async with httpx.AsyncClient(timeout=limits) as http:
            forwarder = Forwarder(backends, http, fast=fast)
            try:
                with pytest.raises(GatewayError) as info:
                    await forwarder.complete(session, request, "c1")
            finally:
                if fast is not None:
                    await fast.aclose()
        return info.value

    started = time.monotonic()
    error = asyncio.run(call())
    assert time.monotonic() - started < SILENT_READ_S + 2.0
    assert error.kind is ErrorKind.timeout, error
    assert healthy.behaviour.calls == 0
    assert backends.unhealthy_until == {}
