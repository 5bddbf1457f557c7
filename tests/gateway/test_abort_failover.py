"""A backend whose engine aborts the request (finish_reason `abort`, `farm llm serve --finish-faults abort=1`)
is failed over like a 5xx: the call is answered by the next backend of the farm's pool, for a plain call and
for a stream that had handed nothing on yet, and the aborting backend is marked unhealthy. And a call sent
ahead to the pin the gateway remembers is dropped when the pool has moved the pin."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
import redis

from farm.embedded_redis import EmbeddedRedis, free_port
from farm.gateway.forwarding import Forwarder
from farm.gateway.normalized import ChatRequest
from farm.gateway.sessions import SessionInfo
from farm.gateway.upstream_http import UpstreamClient
from farm.models import BackendInfo
from farm.pool import BackendPool
from tests.gateway.conftest import ROOT, _stop, _wait_ready, start_gateway
from tests.gateway.math_agent import QUESTION, TOOLS

pytestmark = pytest.mark.integration

CHAT = {"model": "any", "messages": [{"role": "user", "content": "Say hello."}], "max_tokens": 16}


@dataclass
class Farm:
    gateway: str
    aborting: str
    healthy: str
    pool: BackendPool


def _llm(*extra: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    args = [sys.executable, "-m", "farm.llm", "serve", "--policy", "scripted", "--port", str(port), *extra]
    return subprocess.Popen(args, cwd=ROOT), f"http://127.0.0.1:{port}/v1"


@pytest.fixture(scope="module")
def farm(redis_server: EmbeddedRedis) -> Iterator[Farm]:
    (aborting, a), (healthy, b) = _llm("--finish-faults", "abort=1"), _llm()
    try:
        for process, url in ((aborting, a), (healthy, b)):
            _wait_ready(f"{url}/models", process)
        db = redis_server.url.rsplit("/", 1)[0] + "/5"
        client = redis.Redis.from_url(db)
        client.flushdb()
        pool = BackendPool(client)
        pool.add(a)  # registered first: a new session is pinned to it while it is healthy
        pool.add(b)
        gateway, url = start_gateway(db, [])
        yield Farm(url, a, b, pool)
        _stop(gateway)
        client.flushdb()
        client.close()
    finally:
        _stop(aborting)
        _stop(healthy)


def _session(farm: Farm) -> str:
    farm.pool.mark_healthy(farm.aborting)
    created = httpx.post(f"{farm.gateway}/gateway/sessions", json={}).raise_for_status().json()
    return str(created["base_url"])


def test_an_aborted_reply_fails_over(farm: Farm) -> None:
    base = _session(farm)
    reply = httpx.post(f"{base}/v1/chat/completions", json=CHAT, timeout=30)
    assert reply.status_code == 200, reply.text
    assert reply.json()["choices"][0]["finish_reason"] == "stop"
    (record,) = httpx.get(f"{base}/completions").json()
    assert (record["backend"], record["metadata"]["attempts"]) == (farm.healthy, 2)
    assert record["response_ids"] and record["finish_reason"] == "stop"
    assert farm.aborting in {b.address for b in farm.pool.list() if not b.healthy}


def test_a_stream_aborted_before_its_first_chunk_fails_over(farm: Farm) -> None:
    base = _session(farm)
    # A tool call is held back until it is complete, so the aborting engine's stream (half a call) ends
    # `abort` with nothing handed on.
    body = {**CHAT, "messages": [QUESTION], "tools": TOOLS, "max_tokens": 64, "stream": True}
    with httpx.stream("POST", f"{base}/v1/chat/completions", json=body, timeout=30) as response:
        assert response.status_code == 200
        chunks = [json.loads(line[5:]) for line in response.iter_lines() if line.startswith("data: {")]
    assert not any("error" in chunk for chunk in chunks), chunks
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    (record,) = httpx.get(f"{base}/completions").json()
    assert (record["backend"], record["metadata"]["attempts"]) == (farm.healthy, 2)
    assert len(record["response_logprobs"]) == len(record["response_ids"]) > 0
    assert httpx.get(f"{base}").json()["failed_call_count"] == 0


class _Pool:
    """A backend source answering `acquire` with a fixed backend (in process: the forwarder's own view)."""

    def __init__(self, backend: BackendInfo) -> None:
        self.backend = backend
        self.unhealthy: list[str] = []

    async def acquire(self, key: str) -> BackendInfo | None:
        return self.backend

    async def release(self, key: str) -> None:
        pass

    async def mark_unhealthy(self, address: str) -> None:
        self.unhealthy.append(address)

    async def call_started(self, address: str) -> None:
        pass

    async def call_finished(self, address: str) -> None:
        pass


def _forward(farm: Farm, remembered: str, acquired: str, stream: bool) -> tuple[str, int, list[str]]:
    """One call through a Forwarder that remembers `remembered` as the session's pin while the pool
    answers `acquired`: (backend that answered, attempts, backends marked unhealthy)."""
    pool = _Pool(BackendInfo(address=acquired))
    session = SessionInfo(session_id="s", created_at=0.0)
    request = ChatRequest(messages=CHAT["messages"], sampling={"max_tokens": 8}, stream=stream)

    async def call() -> tuple[str, int]:
        async with httpx.AsyncClient() as http:
            forwarder = Forwarder(pool, http, fast=UpstreamClient())
            forwarder._pins.remember("s", BackendInfo(address=remembered))
            try:
                if not stream:
                    result = await forwarder.complete(session, request, "c1")
                    return result.backend, result.attempts
                upstream = await forwarder.open_stream(session, request)
                async for _ in upstream.events():
                    pass
                await upstream.aclose()
                return upstream.address, upstream.attempts
            finally:
                await forwarder.fast.aclose()  # type: ignore[union-attr]

    backend, attempts = asyncio.run(call())
    return backend, attempts, pool.unhealthy


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "stream"])
def test_a_call_sent_ahead_to_a_moved_pin_is_dropped(farm: Farm, stream: bool) -> None:
    """The POST sent to the remembered pin while the pool confirms it is abandoned when the pool pinned the
    session elsewhere: the pool's backend answers, on the first attempt, and nobody is marked unhealthy."""
    assert _forward(farm, farm.aborting, farm.healthy, stream) == (farm.healthy, 1, [])
    assert _forward(farm, farm.healthy, farm.healthy, stream) == (farm.healthy, 1, [])
