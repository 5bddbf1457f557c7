"""The gateway in front of the farm's reference LLM server (real chat template and tokenizer)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from farm.embedded_redis import EmbeddedRedis, free_port
from tests.gateway.conftest import _spawn, _stop, start_gateway
from tests.gateway.math_agent import QUESTION, agent_turn, open_session

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def reference_gateway(redis_server: EmbeddedRedis) -> Iterator[str]:
    port = free_port()
    args = ["-m", "farm.llm", "serve", "--policy", "scripted", "--port", str(port)]
    try:
        llm = _spawn(args, f"http://127.0.0.1:{port}/v1/models")
    except (RuntimeError, TimeoutError) as exc:
        pytest.skip(f"reference LLM server did not start: {exc}")
    process, url = start_gateway(redis_server.url.rsplit("/", 1)[0] + "/3", [f"http://127.0.0.1:{port}/v1"])
    yield url
    _stop(process)
    _stop(llm)


def test_multi_turn_session_exports_token_faithful_traces(reference_gateway: str) -> None:
    base, client = open_session(reference_gateway, "ref")
    messages: list[Any] = [{"role": "system", "content": "You are a careful math agent."}, QUESTION]
    for turn in range(4):
        agent_turn(client, messages, turn)
    records = httpx.get(f"{base}/completions").json()
    assert len(records) == 4 and all(r["prompt_ids"] and r["response_logprobs"] for r in records)
    by_id = {r["completion_id"]: r for r in records}
    traces = httpx.post(f"{base}/export", json={"builder": "prefix_merging"}).json()["traces"]
    assert sum(len(t["metadata"]["completion_ids"]) for t in traces) == 4
    for trace in traces:
        trainable = [0] * len(trace["response_ids"])
        for segment in trace["metadata"]["segments"]:
            record, start, n = by_id[segment["completion_id"]], segment["start"], segment["length"]
            assert trace["response_ids"][start : start + n] == record["response_ids"]
            assert trace["response_logprobs"][start : start + n] == record["response_logprobs"]
            trainable[start : start + n] = [1] * n
            if not trace["metadata"]["retokenization_drift"]:
                assert trace["prompt_ids"] + trace["response_ids"][:start] == record["prompt_ids"]
        assert trace["loss_mask"] == trainable
    assert len(traces) == 1, [t["metadata"]["split_reason"] for t in traces]
