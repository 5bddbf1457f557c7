"""The gateway in front of a reference server that behaves like SGLang (`farm llm serve --emulate sglang`),
registered in the farm's pool as kind "sglang" at its root address: traces stay token-faithful."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import redis

from farm.chat.tokenizer import ChatTokenizer
from farm.embedded_redis import EmbeddedRedis, free_port
from farm.gateway.backends import StaticBackends
from farm.gateway.forwarding import Forwarder
from farm.pool import BackendPool
from tests.gateway.conftest import _spawn, _stop, start_gateway
from tests.gateway.math_agent import QUESTION, TOOLS, agent_turn, open_session

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def sglang_root() -> Iterator[str]:
    """The root address of a reference server emulating SGLang (its OpenAI routes live under /v1)."""
    port = free_port()
    args = ["-m", "farm.llm", "serve", "--policy", "scripted", "--emulate", "sglang", "--port", str(port)]
    llm = _spawn(args, f"http://127.0.0.1:{port}/health")
    yield f"http://127.0.0.1:{port}"
    _stop(llm)


@pytest.fixture(scope="module")
def sglang_gateway(redis_server: EmbeddedRedis, sglang_root: str) -> Iterator[str]:
    db = redis_server.url.rsplit("/", 1)[0] + "/4"
    client = redis.Redis.from_url(db)
    client.flushdb()
    BackendPool(client).add(sglang_root, kind="sglang")
    process, url = start_gateway(db, [])
    yield url
    _stop(process)
    client.flushdb()
    client.close()


def test_the_served_model_is_looked_up_under_v1_of_an_sglang_root(sglang_root: str) -> None:
    """The gateway names the backend's own model upstream (harnesses send claude-*, gpt-*): for SGLang
    registered at its root that list is at /v1/models, not /models (which answers 404)."""
    served = httpx.get(f"{sglang_root}/v1/models").json()["data"][0]["id"]
    assert httpx.get(f"{sglang_root}/models").status_code == 404

    async def lookup() -> str | None:
        async with httpx.AsyncClient() as http:
            forwarder = Forwarder(StaticBackends([sglang_root]), http)
            return await forwarder.served_model(sglang_root, "sglang")

    assert asyncio.run(lookup()) == served


def test_multi_turn_traces_are_token_faithful(sglang_gateway: str) -> None:
    tokenizer = ChatTokenizer.load()
    base, client = open_session(sglang_gateway, "sgl")
    messages: list[Any] = [{"role": "system", "content": "You are a careful math agent."}, QUESTION]
    rendered: list[list[int]] = []
    for turn in range(3):
        rendered.append(tokenizer.apply_chat_template(messages, TOOLS))
        agent_turn(client, messages, turn)
    records = httpx.get(f"{base}/completions").json()
    assert [r["prompt_ids"] for r in records] == rendered
    for record in records:
        assert record["response_ids"] and len(record["response_logprobs"]) == len(record["response_ids"])
    traces = httpx.post(f"{base}/export", json={"builder": "prefix_merging"}).json()["traces"]
    assert len(traces) == 1, [t["metadata"]["split_reason"] for t in traces]
    trace, by_id = traces[0], {r["completion_id"]: r for r in records}
    for segment in trace["metadata"]["segments"]:
        record, start, n = by_id[segment["completion_id"]], segment["start"], segment["length"]
        assert trace["prompt_ids"] + trace["response_ids"][:start] == record["prompt_ids"]
        assert trace["response_ids"][start : start + n] == record["response_ids"]
        assert trace["response_logprobs"][start : start + n] == record["response_logprobs"]


def test_a_streamed_call_gets_its_ids_from_sglext(sglang_gateway: str) -> None:
    tokenizer = ChatTokenizer.load()
    base, client = open_session(sglang_gateway, "sgl")
    messages = [{"role": "user", "content": "Say hello."}]
    stream = client.chat.completions.create(model="any", messages=messages, max_tokens=16, stream=True)
    text = "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices)
    (record,) = httpx.get(f"{base}/completions").json()
    assert record["prompt_ids"] == tokenizer.apply_chat_template(messages)
    assert len(record["response_logprobs"]) == len(record["response_ids"]) > 0
    assert tokenizer.decode(record["response_ids"]).startswith(text)


def test_each_record_names_the_weights_that_sampled_it(
    sglang_gateway: str, sglang_root: str, redis_server: EmbeddedRedis
) -> None:
    """A record carries the backend's policy version: SGLang's own `metadata.weight_version` when it is a
    version number, else the pool's registration when the call was sent; the merged trace lists them per
    turn (the keys the agent loop's traces carry), so a rollout that spans a publish says so."""
    pool = redis.Redis.from_url(redis_server.url.rsplit("/", 1)[0] + "/4")
    BackendPool(pool).add(sglang_root, kind="sglang", policy_version=3)
    base, client = open_session(sglang_gateway, "sgl")
    messages: list[Any] = [QUESTION]
    try:
        for turn in range(3):
            if turn == 1:  # a publish lands: the server says its new weights, the pool is not told yet
                httpx.post(f"{sglang_root}/update_weight_version", json={"new_version": "4"})
            if turn == 2:  # the pool is ahead of the server: the server's word wins
                BackendPool(pool).add(sglang_root, kind="sglang", policy_version=5)
            agent_turn(client, messages, turn)
    finally:
        httpx.post(f"{sglang_root}/update_weight_version", json={"new_version": "default"})
        pool.close()
    records = httpx.get(f"{base}/completions").json()
    assert [(r["policy_version"], r["policy_version_source"]) for r in records] == [
        (3, "pool"),
        (4, "backend"),
        (4, "backend"),
    ]
    (trace,) = httpx.post(f"{base}/export", json={"builder": "prefix_merging"}).json()["traces"]
    assert trace["metadata"]["turn_policy_versions"] == [3, 4, 4]
    assert trace["metadata"]["turn_policy_version_sources"] == ["pool", "backend", "backend"]
    assert trace["metadata"]["policy_version_span"] == [3, 4]
    per_request = httpx.post(f"{base}/export", json={"builder": "per_request"}).json()["traces"]
    assert [t["metadata"]["turn_policy_versions"] for t in per_request] == [[3], [4], [4]]


def test_a_streamed_record_names_the_registered_version(
    sglang_gateway: str, sglang_root: str, redis_server: EmbeddedRedis
) -> None:
    """SGLang streams no weight_version: a streamed call's record takes the pool's registration."""
    pool = redis.Redis.from_url(redis_server.url.rsplit("/", 1)[0] + "/4")
    try:
        BackendPool(pool).add(sglang_root, kind="sglang", policy_version=9)
        base, client = open_session(sglang_gateway, "sgl")
        messages = [{"role": "user", "content": "Say hello."}]
        stream = client.chat.completions.create(model="any", messages=messages, max_tokens=8, stream=True)
        assert "".join(chunk.choices[0].delta.content or "" for chunk in stream if chunk.choices) is not None
    finally:
        pool.close()
    (record,) = httpx.get(f"{base}/completions").json()
    assert (record["policy_version"], record["policy_version_source"]) == (9, "pool")
