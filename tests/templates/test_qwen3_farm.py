"""Multi-turn math and code rollouts through a real farm whose workers and reference LLM use Qwen3's real
tokenizer and chat template (FARM_TOKENIZER / --tokenizer): every job ends done, with tool turns, and the
token invariant holds against that tokenizer."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from farm.chat.tokenizer import ChatTokenizer
from farm.launcher import LocalFarm, WorkerSpec
from farm.models.results import JobResult, JobState
from tests.integration.jobs import assert_token_faithful
from tests.templates.conftest import qwen3_dir
from tests.templates.invariant import assert_invariant

pytestmark = [pytest.mark.integration, pytest.mark.slow]
CODE = Path(__file__).resolve().parents[2] / "handlers" / "code" / "problems.jsonl"


@pytest.fixture(scope="module")
def qwen_farm() -> Iterator[httpx.Client]:
    tokenizer = qwen3_dir()
    farm = LocalFarm(
        workers=[WorkerSpec("init", concurrency=2), WorkerSpec("run", concurrency=8), WorkerSpec("eval")],
        llm_args=["--tokenizer", tokenizer, "--accuracy", "1.0"],
        env={"FARM_TOKENIZER": tokenizer},
    )
    with farm, httpx.Client(base_url=farm.api_url, timeout=180) as api:
        yield api


def run(api: httpx.Client, instance: dict, seed: int) -> JobResult:
    body = {"instance": instance, "sampling_params": {"max_tokens": 1024, "seed": seed}}
    return JobResult.model_validate(api.post("/process", json=body).json())


def test_math_and_code_rollouts_with_qwen3_end_done_token_faithful(
    qwen_farm: httpx.Client, qwen3: ChatTokenizer
) -> None:
    math = [
        {"handler": "math", "question": "What is 84 * 76 + 123?", "answer": "6507"},
        {"handler": "math", "question": "What is 19 * 23 - 7?", "answer": "430"},
    ]
    code = [{"handler": "code", **json.loads(line)} for line in CODE.read_text().splitlines()[:2]]
    results = [run(qwen_farm, instance, seed) for seed, instance in enumerate(math + code)]
    for result in results:
        assert result.state is JobState.done, result.error
        assert result.reward == 1.0, (result.handler, result.artifacts)
        assert_token_faithful(result, qwen3)
        roles = [m["role"] for m in result.trajectory.traces[0].response_messages]
        assert roles[:3] == ["assistant", "tool", "assistant"], roles
        text = qwen3.decode(result.trajectory.traces[0].response_ids)
        assert "<tool_response>" in text and text.endswith("<|im_end|>")
        assert qwen3.family == "hermes" and "<tool_call>" in text
        assert_invariant(result.trajectory.traces[0], qwen3)
