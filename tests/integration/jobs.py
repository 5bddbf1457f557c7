"""Submitting jobs and waiting for their states over HTTP, shared by the integration tests."""

from __future__ import annotations

import uuid
from typing import Any

import httpx

from farm.chat.tokenizer import ChatTokenizer
from farm.models.results import JobResult
from tests.waiting import poll, wait_until


def submit(api: httpx.Client, instance: dict, **body: object) -> str:
    """POST /process with wait=false under a fresh job id; returns the id."""
    job_id = f"{instance['handler']}-{uuid.uuid4().hex[:10]}"
    response = api.post("/process", json={"instance": instance, "job_id": job_id, "wait": False, **body})
    assert response.status_code == 202, response.text
    return job_id


def wait_state(api: httpx.Client, job_id: str, states: set[str], timeout_s: float = 30) -> JobResult:
    """The job once it is in one of `states`, or as it is when the timeout passes."""
    return poll(
        lambda: JobResult.model_validate(api.get(f"/jobs/{job_id}").json()),
        timeout_s,
        accept=lambda result: result.state.value in states,
        interval_s=0.02,
    )


def wait_task_completed(
    api: httpx.Client, task_id: str, timeout_s: float = 60, ignore: tuple[type[BaseException], ...] = ()
) -> dict[str, Any]:
    """GET /rollout/task/{id} until the task is completed; its status (every session's result)."""
    return wait_until(
        lambda: api.get(f"/rollout/task/{task_id}").json(),
        timeout_s,
        accept=lambda status: status["state"] == "completed",
        interval_s=0.05,
        ignore=ignore,
        what=f"task {task_id} completed",
    )


def assert_token_faithful(result: JobResult, tokenizer: ChatTokenizer | None = None) -> None:
    """The contract's invariant, checked against what the backend really sampled (re-decoded here)."""
    assert result.trajectory.traces, result
    tokenizer = tokenizer or ChatTokenizer.load()
    for trace in result.trajectory.traces:
        n = len(trace.response_ids)
        assert len(trace.loss_mask) == n == len(trace.response_logprobs)
        sampled = [i for i, m in enumerate(trace.loss_mask) if m == 1]
        assert sampled, "a rollout samples at least one token"
        assert all(trace.response_logprobs[i] <= 0.0 for i in sampled)
        assert all(trace.response_logprobs[i] == 0.0 for i in range(n) if trace.loss_mask[i] == 0)
        # every sampled segment ends with the end-of-turn token, as vLLM returns it
        for i in sampled:
            if i + 1 == n or trace.loss_mask[i + 1] == 0:
                assert trace.response_ids[i] == tokenizer.eos_token_id
        # the prompt is exactly the chat template of the prompt messages
        assert trace.prompt_ids == tokenizer.apply_chat_template(
            trace.prompt_messages, tools=trace.tools or None, add_generation_prompt=True
        )


def process(api: httpx.Client, instance: dict, seed: int) -> JobResult:
    """POST /process (waiting) with a seed and room for a long answer."""
    body = {"instance": instance, "sampling_params": {"max_tokens": 1024, "seed": seed}}
    return JobResult.model_validate(api.post("/process", json=body).json())
