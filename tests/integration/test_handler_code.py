"""The `code` handler end to end, through HTTP only: the scripted policy writes /workspace/solution.py with
the editor, runs it with bash and finishes; eval grades it with the hidden tests in a fresh sandbox."""

from __future__ import annotations

import json
import random
import uuid
from pathlib import Path

import httpx
import pytest

from farm.models.results import JobResult, JobState
from handlers.code.suite import PROBLEMS
from tests.integration.jobs import assert_token_faithful, submit, wait_state, wait_task_completed

pytestmark = pytest.mark.integration

SUITE = Path(__file__).resolve().parents[2] / "handlers" / "code" / "problems.jsonl"
INSTANCES = {p["id"]: p for p in map(json.loads, SUITE.read_text().splitlines())}
BY_SLUG = {p.slug: p for p in PROBLEMS}
DIVERGES_AT = {"write": 0, "fix": 2, "complete": 1}
"""The turn at which the scripted policy's success and failure paths part (see build_suite.script)."""
ACCURACY = 0.5  # the farm fixture's reference servers run with --accuracy 0.5
SAMPLING = {"max_tokens": 1024}


def instance(slug: str) -> dict:
    return {"handler": "code", **INSTANCES[f"code-{slug}"]}


def seed_for(slug: str, succeed: bool) -> int:
    """A sampling seed under which the scripted policy takes the wanted path for this problem."""
    turn = DIVERGES_AT[BY_SLUG[slug].kind]
    return next(s for s in range(1000) if (random.Random(s + turn).random() < ACCURACY) == succeed)


def check_result(result: JobResult, slug: str) -> None:
    problem = BY_SLUG[slug]
    assert result.state is JobState.done, (result.state, result.error)
    assert result.handler == "code"
    solution = result.artifacts["solution"]
    assert solution in (problem.solution, problem.wrong)
    assert result.reward == (1.0 if solution == problem.solution else 0.0)
    assert result.metadata["tests_total"] == len(result.artifacts["test_results"]) > 0
    passed = result.metadata["tests_passed"]
    assert result.metadata["pass_fraction"] == pytest.approx(
        passed / result.metadata["tests_total"], abs=1e-4
    )
    if result.reward == 0.0:
        assert passed < result.metadata["tests_total"] and result.metadata["failure_log"]
    assert_token_faithful(result)
    trace = result.trajectory.traces[0]
    assert trace.reward == result.reward
    assert trace.metadata["turns"] >= 3 and trace.metadata["tool_calls"] >= 2
    roles = [m["role"] for m in trace.response_messages]
    assert roles[:4] == ["assistant", "tool", "assistant", "tool"]
    calls = [c["function"]["name"] for m in trace.response_messages for c in m.get("tool_calls") or []]
    assert "editor" in calls and "bash" in calls
    assert result.metadata["finish_reason"] == ("answer" if problem.kind == "complete" else "finish_tool")
    # The hidden tests never reach the policy: no hidden test's name appears in anything it saw.
    seen = json.dumps([trace.prompt_messages, trace.response_messages])
    hidden_only = [o["name"] for o in result.artifacts["test_results"] if o["name"] not in seen]
    assert len(hidden_only) == len(result.artifacts["test_results"])


def test_code_jobs_are_graded_by_hidden_tests(api: httpx.Client) -> None:
    planned = [
        ("roman-to-int", True),
        ("spiral-order", False),
        ("merge-intervals", True),
        ("evaluate-rpn", False),
        ("median", True),
    ]
    jobs = {
        submit(api, instance(slug), sampling_params={**SAMPLING, "seed": seed_for(slug, ok)}): (slug, ok)
        for slug, ok in planned
    }
    task_id = f"code-{uuid.uuid4().hex[:8]}"
    body = {
        "task_id": task_id,
        "instance": instance("pascal-row"),
        "num_samples": 4,
        "sampling_params": SAMPLING,
    }
    submitted = api.post("/rollout/task/submit", json=body)
    assert submitted.status_code == 200, submitted.text

    rewards = []
    for job_id, (slug, ok) in jobs.items():
        result = wait_state(api, job_id, {"done", "failed", "cancelled", "timeout"}, timeout_s=90)
        check_result(result, slug)
        assert result.reward == (1.0 if ok else 0.0), (slug, result.metadata)
        rewards.append(result.reward)
    assert set(rewards) == {0.0, 1.0}

    status = wait_task_completed(api, task_id)
    assert len(status["sessions"]) == 4
    for session in status["sessions"]:
        result = JobResult.model_validate(session["result"])
        check_result(result, "pascal-row")
        assert result.metadata["group_id"] == task_id


@pytest.mark.parametrize(
    ("change", "field"),
    [
        ({"hidden_tests": None}, "hidden_tests"),
        ({"hidden_tests": "x = 1\n"}, "hidden_tests"),
        ({"hidden_tests": "def test_a(:\n"}, "hidden_tests"),
        ({"prompt": ""}, "prompt"),
        ({"entry_point": "not an identifier"}, "entry_point"),
        ({"max_turns": "many"}, "max_turns"),
        ({"test_timeout_s": 0}, "test_timeout_s"),
    ],
)
def test_bad_code_instance_is_422_naming_the_field(api: httpx.Client, change: dict, field: str) -> None:
    bad = {k: v for k, v in {**instance("chunk"), **change}.items() if v is not None}
    job_id = f"bad-code-{uuid.uuid4().hex[:8]}"
    response = api.post("/process", json={"instance": bad, "job_id": job_id})
    assert response.status_code == 422, response.text
    assert ["body", "instance", field] in [err["loc"] for err in response.json()["detail"]]
    assert api.get(f"/jobs/{job_id}").status_code == 404
