"""The `harness` handler with the `shell` harness, through HTTP only: a tiny agent using the official
`openai` SDK runs in the sandbox against OPENAI_BASE_URL (the job's gateway session), on the session
farm's scripted reference policy. Completion, test_on_output with a patch, timeout, cancel, bad prepare."""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import httpx
import pytest
import redis

from farm.launcher import LocalFarm
from farm.models.results import JobResult, JobState
from tests.integration.jobs import wait_state, wait_task_completed
from tests.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

INSTRUCTION = "Greet the rollout farm from a shell harness."  # handlers/harness/scripts/harness.jsonl
GREETING = "Hello, rollout farm! Greetings from the scripted policy."
AGENT = """\
import os, sys
from openai import OpenAI

client = OpenAI()  # OPENAI_BASE_URL and OPENAI_API_KEY point at the gateway session
reply = client.chat.completions.create(
    model=os.environ["OPENAI_MODEL"],
    messages=[{"role": "user", "content": os.environ["FARM_INSTRUCTION"]}],
)
print(reply.choices[0].message.content, flush=True)
"""
WRITE_AGENT = {"write": "agent.py", "content": AGENT}


def task_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def submit_task(api: httpx.Client, **body: Any) -> str:
    """POST /rollout/task/submit; returns the id of its one session's job."""
    body = {"instruction": INSTRUCTION, "timeout_seconds": 120, **body}
    response = api.post("/rollout/task/submit", json=body)
    assert response.status_code == 200, response.text
    [job_id] = response.json()["session_ids"]
    return job_id


def submit_greeting_agent(api: httpx.Client, task: str, **body: Any) -> str:
    """A shell harness whose agent makes its one model call and prints the reply."""
    runtime = {"prepare": [WRITE_AGENT]}
    return submit_task(
        api, task_id=task, runtime=runtime, agent={"harness": "shell", "command": "python agent.py"}, **body
    )


def submit_hanging_agent(api: httpx.Client, task: str, timeout_s: int) -> str:
    """A shell harness whose agent makes its one model call, then hangs until it is stopped."""
    return submit_task(
        api,
        task_id=task,
        timeout_seconds=timeout_s,
        runtime={"prepare": [WRITE_AGENT]},
        agent={"harness": "shell", "command": "python agent.py && sleep 600"},
    )


def wait_task(api: httpx.Client, task: str, timeout_s: float) -> JobResult:
    """GET /rollout/task/{id} until it completes; its one session's result."""
    [session] = wait_task_completed(api, task, timeout_s)["sessions"]
    return JobResult.model_validate(session["result"])


def recorded_completions(farm: LocalFarm, task: str) -> int:
    """How many model calls the gateway recorded for the task's sessions so far (read from Redis)."""
    client = redis.Redis.from_url(farm.redis_url, decode_responses=True)
    try:
        total = 0
        for key in client.scan_iter(match="farm:gateway:session:*:completions"):
            info = client.hget(key.removesuffix(":completions"), "info")
            if info and json.loads(info).get("task_id") == task:
                total += client.llen(key)
        return total
    finally:
        client.close()


def assert_traces_are_the_recorded_completions(api: httpx.Client, result: JobResult) -> list[dict]:
    """per_request: one trace per recorded completion, every response token sampled with its logprob."""
    session = result.artifacts["gateway_session_id"]
    completions = api.get(f"/gateway/sessions/{session}/completions").json()
    traces = result.trajectory.traces
    assert len(traces) == len(completions) >= 1
    for trace, completion in zip(traces, completions, strict=True):
        assert trace.response_ids == completion["response_ids"]
        assert trace.loss_mask == [1] * len(trace.response_ids)
        assert trace.response_logprobs == completion["response_logprobs"]
        assert trace.prompt_ids == completion["prompt_ids"]
        assert trace.metadata["builder"] == "per_request"
        assert trace.metadata["harness"] == "shell" and trace.metadata["job_id"] == result.job_id
    return completions


def test_shell_agent_completes_through_the_gateway(api: httpx.Client) -> None:
    task = task_id("shell-ok")
    submit_greeting_agent(api, task, metadata={"policy_version": 7})
    result = wait_task(api, task, timeout_s=90)
    assert result.state is JobState.done, result.error
    assert result.reward == 1.0 and result.metadata["evaluator"] == "session_completed"
    assert result.artifacts["exit_code"] == 0 and result.artifacts["completion_count"] == 1
    assert GREETING in result.artifacts["output_tail"]
    assert "patch" not in result.artifacts  # the workspace is no git repository
    [completion] = assert_traces_are_the_recorded_completions(api, result)
    assert completion["provider"] == "openai_chat"
    assert completion["request_messages"] == [{"role": "user", "content": INSTRUCTION}]
    assert completion["response_message"]["content"] == GREETING
    trace = result.trajectory.traces[0]
    assert trace.reward == 1.0 and trace.metadata["policy_version"] == 7


def test_test_on_output_scores_what_the_agent_left_and_the_patch_shows_it(api: httpx.Client) -> None:
    task = task_id("shell-test")
    submit_task(
        api,
        task_id=task,
        runtime={"prepare": [WRITE_AGENT, {"git_init": True}]},
        agent={"harness": "shell", "command": "python agent.py > greeting.txt"},
        evaluator={
            "strategy": "test_on_output",
            "config": {"command": "grep -q 'rollout farm' greeting.txt"},
        },
    )
    result = wait_task(api, task, timeout_s=90)
    assert result.state is JobState.done, result.error
    assert result.reward == 1.0
    assert result.artifacts["test"]["passed"] is True and result.artifacts["test"]["fresh"] is False
    patch = result.artifacts["patch"]
    assert "new file mode" in patch and f"+{GREETING}" in patch and "agent.py" not in patch


def test_timeout_still_returns_the_traces_captured(api: httpx.Client) -> None:
    task = task_id("shell-timeout")
    started = time.monotonic()
    job_id = submit_hanging_agent(api, task, timeout_s=20)
    result = wait_state(api, job_id, {"timeout", "failed", "done", "cancelled"}, timeout_s=60)
    assert result.state is JobState.timeout, result
    assert time.monotonic() - started < 50
    assert result.error is not None and result.error.stage == "run"
    assert GREETING in result.artifacts["output_tail"]
    assert result.artifacts["completion_count"] == 1
    assert_traces_are_the_recorded_completions(api, result)
    assert result.timings.run < 20


def test_cancel_stops_the_harness_and_keeps_its_traces(api: httpx.Client, farm: LocalFarm) -> None:
    task = task_id("shell-cancel")
    job_id = submit_hanging_agent(api, task, timeout_s=300)
    wait_until(lambda: recorded_completions(farm, task), 60, interval_s=0.05, what="the agent's model call")
    cancelled_at = time.monotonic()
    assert api.post("/cancel", json={"job_id": job_id}).status_code == 200
    result = wait_state(api, job_id, {"cancelled", "failed", "done", "timeout"}, timeout_s=30)
    assert result.state is JobState.cancelled, result
    assert time.monotonic() - cancelled_at < 15
    assert result.artifacts["completion_count"] == 1
    assert GREETING in result.artifacts["output_tail"]
    assert_traces_are_the_recorded_completions(api, result)


def test_a_failing_prepare_step_fails_init_and_names_the_step(api: httpx.Client) -> None:
    task = task_id("shell-prepare")
    submit_task(
        api,
        task_id=task,
        runtime={"prepare": [WRITE_AGENT, "echo preparing; exit 7"]},
        agent={"harness": "shell", "command": "python agent.py"},
    )
    result = wait_task(api, task, timeout_s=60)
    assert result.state is JobState.failed
    assert result.error is not None and result.error.stage == "init"
    assert "runtime.prepare[1]" in result.error.message and "exit code 7" in result.error.message
    assert "preparing" in result.error.message


def test_shell_without_a_command_fails_clearly(api: httpx.Client) -> None:
    # The task API refuses it at the door...
    refused = api.post(
        "/rollout/task/submit",
        json={"task_id": task_id("shell-nocmd"), "instruction": "Do it.", "agent": {"harness": "shell"}},
    )
    assert refused.status_code == 422
    assert refused.json()["detail"][0]["loc"] == ["body", "agent", "command"]
    # ...and an instance sent straight to /process fails its init with the reason.
    job_id = f"harness-nocmd-{uuid.uuid4().hex[:8]}"
    body = {"instance": {"handler": "harness", "harness": "shell", "instruction": "Do it."}, "job_id": job_id}
    assert api.post("/process", json={**body, "wait": False}).status_code == 202
    result = wait_state(api, job_id, {"done", "failed", "cancelled", "timeout"}, timeout_s=60)
    assert result.state is JobState.failed
    assert result.error is not None and "command" in result.error.message
