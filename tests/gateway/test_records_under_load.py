"""Every model call the gateway answers is in its session's trace, even when the gateway is starved.

The gateway (`farm gateway`, a real process) runs with a Redis pool of two connections and beside a
process that burns a core, and 64 calls are in flight at once, plain and streamed, over eight sessions.
Counted per session: the calls answered (a 200 with a reply, or a stream that finished) equal the
completions recorded, and each call that was not answered left a `failed_calls` entry. Before the record
became part of the answer, the pool's cap made the background write raise (`MaxConnectionsError`) while
the client already had its 200, and a 503 for a session read left no failure entry.

And when the record cannot be stored at all (its Redis is gone), the call is not a 200.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections import Counter
from collections.abc import Iterator

import httpx
import pytest

from farm.embedded_redis import EmbeddedRedis, free_port
from tests.gateway.conftest import ROOT, _stop, _wait_ready

SESSIONS = 8
CALLS_PER_SESSION = 40
IN_FLIGHT = 64


def start_gateway(redis_url: str, backend: str) -> tuple[subprocess.Popen[bytes], str]:
    """`farm gateway`, given a minute to start (imports alone take 15 s on a 2-core machine at load 16)."""
    port = free_port()
    args = ["-m", "farm.gateway.cli", "--port", str(port), "--redis-url", redis_url, "--backend", backend]
    process = subprocess.Popen([sys.executable, *args], cwd=ROOT)
    try:
        _wait_ready(f"http://127.0.0.1:{port}/healthz", process, timeout_s=90)
    except Exception:
        process.kill()
        raise
    return process, f"http://127.0.0.1:{port}"


@pytest.fixture
def cpu_hog() -> Iterator[None]:
    """A process that keeps one core busy for as long as the test runs."""
    hog = subprocess.Popen([sys.executable, "-c", "while True: pass"])
    yield
    hog.kill()
    hog.wait()


@pytest.fixture
def starved_gateway(redis_server: EmbeddedRedis, fake_backend: str) -> Iterator[str]:
    """A gateway whose Redis pool holds two connections (the URL's own option, read by redis-py)."""
    url = redis_server.url.rsplit("/", 1)[0] + "/5?max_connections=2"
    process, root = start_gateway(url, fake_backend)
    yield root
    _stop(process)


def _answered(response: httpx.Response, stream: bool) -> bool:
    if response.status_code != 200:
        return False
    if not stream:
        return bool(response.json().get("choices"))
    events = [line[5:].strip() for line in response.text.splitlines() if line.startswith("data:")]
    if not events or events[-1] != "[DONE]":
        return False
    return not any("error" in json.loads(e) for e in events[:-1])


async def _drive(root: str) -> tuple[dict[str, int], dict[str, int]]:
    """Answered and unanswered calls per session."""
    limits = httpx.Limits(max_connections=IN_FLIGHT, max_keepalive_connections=IN_FLIGHT)
    async with httpx.AsyncClient(base_url=root, timeout=120.0, limits=limits) as client:
        sessions = []
        for n in range(SESSIONS):
            created = await client.post("/gateway/sessions", json={"task_id": f"load-{n}"})
            sessions.append(created.raise_for_status().json()["session_id"])
        answered: Counter[str] = Counter()
        unanswered: Counter[str] = Counter()
        gate = asyncio.Semaphore(IN_FLIGHT)

        async def call(session_id: str, n: int) -> None:
            stream = n % 2 == 1
            body = {"messages": [{"role": "user", "content": f"say {n}"}], "stream": stream}
            async with gate:
                try:
                    response = await client.post(
                        f"/gateway/sessions/{session_id}/v1/chat/completions", json=body
                    )
                except httpx.HTTPError:
                    unanswered[session_id] += 1
                    return
            (answered if _answered(response, stream) else unanswered)[session_id] += 1

        await asyncio.gather(*(call(sid, n) for n in range(CALLS_PER_SESSION) for sid in sessions))
        return {sid: answered[sid] for sid in sessions}, {sid: unanswered[sid] for sid in sessions}


@pytest.mark.slow
def test_every_answered_call_is_recorded_under_cpu_and_pool_starvation(
    starved_gateway: str, cpu_hog: None
) -> None:
    answered, unanswered = asyncio.run(_drive(starved_gateway))
    assert sum(answered.values()) > 0
    for session_id in answered:
        url = f"{starved_gateway}/gateway/sessions/{session_id}"
        info = httpx.get(url, timeout=30).raise_for_status().json()
        exported = httpx.post(f"{url}/export", json={}, timeout=30).raise_for_status().json()
        assert info["completion_count"] == answered[session_id], session_id
        assert len(exported["traces"]) == answered[session_id], session_id
        assert info["failed_call_count"] == unanswered[session_id], session_id
        assert len(exported["failed_calls"]) == unanswered[session_id], session_id


@pytest.mark.slow  # the client's retries ride out a short outage first (~10 s), then the failure log's
def test_a_call_whose_record_cannot_be_stored_is_not_a_success(fake_backend: str) -> None:
    """The session is read and cached while Redis is up; Redis then goes away, so the backend still answers
    but the completion has nowhere to go: the client gets an error, not a reply nobody recorded."""
    redis = EmbeddedRedis().start()
    try:
        process, root = start_gateway(redis.url, fake_backend)
        try:
            base = f"{root}/gateway/sessions"
            session_id = httpx.post(base, json={}).raise_for_status().json()["session_id"]
            url = f"{base}/{session_id}/v1/chat/completions"
            first = httpx.post(url, json={"messages": [{"role": "user", "content": "hi"}]}, timeout=30)
            assert first.status_code == 200  # the session is now known to the gateway process
            redis.stop()
            plain = {"messages": [{"role": "user", "content": "again"}]}
            response = httpx.post(url, json=plain, timeout=90)
            assert response.status_code == 503, response.text
            assert response.json()["error"]["type"]
            streamed = httpx.post(url, json={**plain, "stream": True}, timeout=90)
            # The stream had begun (a 200 with its first frames): it ends with the provider's error event
            # instead of its final frames and [DONE], so an SDK raises.
            assert not _answered(streamed, stream=True), streamed.text
            assert '"error"' in streamed.text
        finally:
            _stop(process)
    finally:
        redis.stop()
