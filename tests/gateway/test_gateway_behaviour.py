"""Session API, provider error shapes, failover and the farm's Redis pool, against real processes."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator

import anthropic
import httpx
import openai
import pytest
import redis

from farm.embedded_redis import EmbeddedRedis, free_port
from farm.pool import BackendPool
from tests.gateway.conftest import _stop, start_gateway
from tests.waiting import wait_until

pytestmark = pytest.mark.integration


def _chat(base_url: str, content: str, **extra: object) -> httpx.Response:
    body = {"model": "m", "messages": [{"role": "user", "content": content}], **extra}
    return httpx.post(f"{base_url}/v1/chat/completions", json=body, timeout=30)


def test_unknown_session_is_refused_in_each_provider_shape(gateway: str) -> None:
    base = f"{gateway}/gateway/sessions/never-issued"
    with pytest.raises(openai.NotFoundError) as chat_error:
        openai.OpenAI(base_url=f"{base}/v1", api_key="x", max_retries=0).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi"}]
        )
    assert chat_error.value.status_code == 404
    with pytest.raises(anthropic.NotFoundError) as anthropic_error:
        anthropic.Anthropic(base_url=base, api_key="x", max_retries=0).messages.create(
            model="claude", max_tokens=10, messages=[{"role": "user", "content": "hi"}]
        )
    assert anthropic_error.value.body["error"]["type"] == "not_found_error"  # type: ignore[index]
    google = httpx.post(f"{base}/v1beta/models/gemini:generateContent", json={"contents": []})
    assert google.status_code == 404 and google.json()["error"]["status"] == "NOT_FOUND"
    management = httpx.post(f"{base}/export", json={"builder": "per_request"})
    assert management.status_code == 404


def test_context_overflow_maps_to_provider_errors(session: dict[str, str]) -> None:
    with pytest.raises(openai.BadRequestError) as chat_error:
        openai.OpenAI(
            base_url=session["base_url"] + "/v1", api_key="x", max_retries=0
        ).chat.completions.create(model="m", messages=[{"role": "user", "content": "OVERFLOW"}])
    assert chat_error.value.code == "context_length_exceeded"
    with pytest.raises(anthropic.BadRequestError) as anthropic_error:
        anthropic.Anthropic(base_url=session["base_url"], api_key="x", max_retries=0).messages.create(
            model="claude", max_tokens=10, messages=[{"role": "user", "content": "OVERFLOW"}]
        )
    body = anthropic_error.value.body
    assert body["error"]["message"] == "prompt is too long: 5000 tokens > 4096 maximum"  # type: ignore[index]
    google = httpx.post(
        f"{session['base_url']}/v1beta/models/g:generateContent",
        json={"contents": [{"role": "user", "parts": [{"text": "OVERFLOW"}]}]},
    )
    assert google.status_code == 400
    assert google.json()["error"]["message"].startswith("The input token count (5000) exceeds")
    stream = httpx.post(
        f"{session['base_url']}/v1/responses", json={"model": "m", "input": "OVERFLOW", "stream": True}
    )
    assert stream.status_code == 400 and stream.json()["error"]["code"] == "context_length_exceeded"
    # Every failed call is logged by class and shows in the export, also when no call succeeded.
    exported = httpx.post(f"{session['base_url']}/export", json={"builder": "prefix_merging"}).json()
    assert exported["traces"] == []
    failed = exported["failed_calls"]
    assert [(f["class"], f["status"]) for f in failed] == [("context_overflow", 400)] * 4
    assert [f["provider"] for f in failed] == ["openai_chat", "anthropic", "google", "openai_responses"]
    assert all(f["at"] > 0 and f["completion_id"].startswith("cmpl-") for f in failed)
    _chat(session["base_url"], "hi").raise_for_status()
    (trace,) = httpx.post(f"{session['base_url']}/export", json={}).json()["traces"]
    assert trace["metadata"]["failed_calls"] == failed
    info = httpx.get(session["base_url"]).json()
    assert info["completion_count"] == 1 and info["failed_call_count"] == 4


def test_session_api_rewards_end_and_discounted_export(gateway: str, session: dict[str, str]) -> None:
    base, sid = session["base_url"], session["session_id"]
    assert base == f"{gateway}/gateway/sessions/{sid}" and len(sid) >= 40
    assert httpx.post(f"{base}/reward", json={"reward": 1.0}).status_code == 409, "nothing to reward yet"
    first = _chat(base, "one").json()
    anthropic_reply = httpx.post(
        f"{base}/v1/messages",
        json={"model": "c", "max_tokens": 50, "messages": [{"role": "user", "content": "two"}]},
    ).json()
    _chat(base, "three")
    assert httpx.post(f"{base}/reward", json={"reward": 1.0}).json()["ok"] is True
    by_id = httpx.post(f"{base}/reward", json={"reward": 0.5, "completion_id": anthropic_reply["id"]})
    assert by_id.json()["completion_id"] == anthropic_reply["id"].removeprefix("msg_")
    assert httpx.post(f"{base}/reward", json={"reward": 0.5, "completion_id": "nope"}).status_code == 404
    records = httpx.get(f"{base}/completions").json()
    assert records[0]["completion_id"] == first["id"]
    assert [r["reward"] for r in records] == [None, 0.5, 1.0]
    assert [r["provider"] for r in records] == ["openai_chat", "anthropic", "openai_chat"]
    traces = httpx.post(f"{base}/export", json={"builder": "per_request", "discount": 0.5}).json()["traces"]
    assert [t["reward"] for t in traces] == [0.5, 1.0, 1.0]
    assert traces[0]["metadata"]["policy_version"] == 7 and traces[0]["metadata"]["task_id"] == "t1"
    concat = httpx.post(f"{base}/export", json={"style": "concat"}).json()["traces"]
    assert len(concat) == 3, "three unrelated one-turn conversations stay separate"
    assert httpx.post(f"{base}/export", json={"builder": "nope"}).status_code == 422
    assert httpx.post(f"{base}/end").json() == {"completion_count": 3}
    assert httpx.get(f"{gateway}/gateway/sessions/{sid}").json()["state"] == "ended"
    assert _chat(base, "late").status_code == 409


def test_paths_without_v1_are_detected(session: dict[str, str]) -> None:
    reply = httpx.post(
        f"{session['base_url']}/chat/completions",
        json={"model": "m", "messages": [{"role": "user", "content": "x"}]},
    )
    assert reply.json()["choices"][0]["message"]["content"] == "echo: x"
    anthropic_reply = httpx.post(
        f"{session['base_url']}/messages",
        headers={"anthropic-version": "2023-06-01"},
        json={"model": "c", "max_tokens": 5, "messages": [{"role": "user", "content": "LONG"}]},
    )
    assert anthropic_reply.json()["stop_reason"] == "max_tokens"


@pytest.fixture
def dead_address() -> str:
    return f"http://127.0.0.1:{free_port()}/v1"


def test_failover_skips_dead_and_failing_backends(
    redis_server: EmbeddedRedis, fake_backend: str, broken_backend: str, dead_address: str
) -> None:
    process, url = start_gateway(redis_server.url, [dead_address, broken_backend, fake_backend])
    try:
        sid = httpx.post(f"{url}/gateway/sessions", json={}).json()["session_id"]
        reply = _chat(f"{url}/gateway/sessions/{sid}", "hello")
        assert reply.status_code == 200, reply.text
        (record,) = httpx.get(f"{url}/gateway/sessions/{sid}/completions").json()
        assert record["backend"] == fake_backend and record["metadata"]["attempts"] == 3
        again = _chat(f"{url}/gateway/sessions/{sid}", "hello")  # sticky on the healthy one now
        assert again.status_code == 200
        assert httpx.get(f"{url}/gateway/sessions/{sid}/completions").json()[1]["metadata"]["attempts"] == 1
    finally:
        _stop(process)


def test_all_backends_failing_gives_the_provider_error(
    redis_server: EmbeddedRedis, dead_address: str
) -> None:
    process, url = start_gateway(redis_server.url, [dead_address])
    try:
        sid = httpx.post(f"{url}/gateway/sessions", json={}).json()["session_id"]
        reply = httpx.post(
            f"{url}/gateway/sessions/{sid}/v1/messages",
            json={"model": "c", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}]},
        )
        assert reply.status_code in (502, 503)
        assert reply.json()["type"] == "error"
        (failed,) = httpx.post(f"{url}/gateway/sessions/{sid}/export", json={}).json()["failed_calls"]
        assert failed["class"] in ("upstream", "unavailable") and failed["status"] == reply.status_code
    finally:
        _stop(process)


@pytest.fixture
def pool_gateway(redis_url: str) -> Iterator[str]:
    process, url = start_gateway(redis_url, [])
    yield url
    _stop(process)


def test_farm_pool_is_used_sticky_and_released(redis_url: str, pool_gateway: str, fake_backend: str) -> None:
    pool = BackendPool(redis.Redis.from_url(redis_url))
    sid = httpx.post(
        f"{pool_gateway}/gateway/sessions", json={"metadata": {"sampling_params": {"max_tokens": 8}}}
    )
    base = sid.json()["base_url"]
    assert _chat(base, "hello").status_code == 503, "no backend registered yet"
    pool.add(fake_backend)
    reply = _chat(base, "a long enough message to be cut", max_tokens=500)
    assert reply.json()["choices"][0]["finish_reason"] == "length", "the session's sampling params win"
    (info,) = pool.list()
    assert info.assigned == 1
    # in-flight bookkeeping finishes off the request path
    wait_until(lambda: pool.list()[0].in_flight, 5, accept=lambda n: n == 0, what="no call in flight")
    httpx.post(f"{base}/end")
    assert pool.list()[0].assigned == 0


def test_gateway_cli_help() -> None:
    out = subprocess.run(
        [sys.executable, "-m", "farm.gateway.cli", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert "--backend" in out.stdout and "--port" in out.stdout


def test_recorded_calls_are_counted_per_provider_for_metrics(
    redis_server: EmbeddedRedis, session: dict[str, str]
) -> None:
    stats = redis.Redis.from_url(redis_server.url.rsplit("/", 1)[0] + "/2")
    before = int(stats.hget("farm:stats", "gateway_calls:openai_chat") or 0)
    assert _chat(session["base_url"], "count me").status_code == 200
    # the record (and its count) is written just after the reply
    counted = wait_until(
        lambda: int(stats.hget("farm:stats", "gateway_calls:openai_chat") or 0),
        5,
        accept=lambda n: n != before,
        what="the call to be counted",
    )
    assert counted == before + 1
    stats.close()
