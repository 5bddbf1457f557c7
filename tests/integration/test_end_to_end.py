"""The whole rollout lifecycle through HTTP only: REST → Celery chain → handler → Redis result."""

from __future__ import annotations

import uuid
from collections import Counter

import httpx
import pytest

from farm.launcher import LocalFarm
from farm.models.results import JobResult, JobState
from tests.integration.jobs import assert_token_faithful, wait_task_completed
from tests.waiting import wait_until

pytestmark = pytest.mark.integration

PROBLEM = {"handler": "math", "question": "What is 84 * 76 + 123?", "answer": "6507"}


def process(api: httpx.Client, **body: object) -> JobResult:
    response = api.post("/process", json={"instance": PROBLEM, **body})
    assert response.status_code == 200, response.text
    return JobResult.model_validate(response.json())


def test_math_job_returns_a_token_faithful_result(api: httpx.Client) -> None:
    result = process(api, sampling_params={"max_tokens": 256, "seed": 1})
    assert result.state is JobState.done, result.error
    assert result.handler == "math"
    # The scripted policy's fate is drawn at the first turn, seeded 1 + 0: Random(1).random() = 0.134 is
    # below the farm's accuracy 0.5, so it computes 84 * 76 + 123 and answers right.
    assert result.reward == 1.0
    assert_token_faithful(result)
    trace = result.trajectory.traces[0]
    assert trace.metadata["tool_calls"] >= 1  # the policy used the python tool
    assert [m["role"] for m in trace.response_messages][:2] == ["assistant", "tool"]
    assert result.artifacts["answer"] == "6507"
    assert result.timings.init > 0 and result.timings.run > 0 and result.timings.eval > 0


def test_sampled_tokens_are_what_the_backend_returned(api: httpx.Client, farm: LocalFarm) -> None:
    """Replay: the same prompt + seed on the job's backend reproduces each sampled segment."""
    result = process(api, sampling_params={"max_tokens": 256, "seed": 5})
    trace = result.trajectory.traces[0]
    backend = trace.metadata["backends"][0]
    context = list(trace.prompt_ids)
    turn = 0
    i = 0
    n = len(trace.response_ids)
    while i < n:
        if trace.loss_mask[i] == 0:
            context.append(trace.response_ids[i])
            i += 1
            continue
        j = i
        while j < n and trace.loss_mask[j] == 1:
            j += 1
        seed = (5 + turn) % (2**31)
        body = {
            "prompt": context,
            "max_tokens": 256,
            "seed": seed,
            "temperature": 1.0,
            "logprobs": 0,
            "return_token_ids": True,
        }
        choice = httpx.post(f"{backend}/completions", json=body, timeout=30).json()["choices"][0]
        assert choice["token_ids"] == trace.response_ids[i:j]
        assert choice["logprobs"]["token_logprobs"] == pytest.approx(trace.response_logprobs[i:j])
        context.extend(trace.response_ids[i:j])
        turn += 1
        i = j
    assert turn >= 2


def test_group_of_four_samples_gives_four_sessions(api: httpx.Client) -> None:
    task_id = f"t-{uuid.uuid4().hex[:8]}"
    body = {"task_id": task_id, "instance": PROBLEM, "num_samples": 4, "sampling_params": {"max_tokens": 256}}
    submitted = api.post("/rollout/task/submit", json=body)
    assert submitted.status_code == 200, submitted.text
    assert len(submitted.json()["session_ids"]) == 4
    again = api.post("/rollout/task/submit", json=body)  # idempotent resubmission
    assert again.json()["session_ids"] == submitted.json()["session_ids"]
    status = wait_task_completed(api, task_id)
    sessions = status["sessions"]
    assert len(sessions) == 4
    assert {s["state"] for s in sessions} == {"done"}
    for s in sessions:
        result = JobResult.model_validate(s["result"])
        assert result.metadata["group_id"] == task_id
        assert_token_faithful(result)


def test_wait_false_then_poll_and_resubmit_is_idempotent(api: httpx.Client) -> None:
    job_id = f"job-{uuid.uuid4().hex[:8]}"
    first = api.post("/process", json={"instance": PROBLEM, "job_id": job_id, "wait": False})
    assert first.status_code == 202 and first.json() == {"job_id": job_id}
    final = process(api, job_id=job_id)  # same id: waits for the same job, queues nothing new
    assert final.job_id == job_id and final.state is JobState.done
    assert JobResult.model_validate(api.get(f"/jobs/{job_id}").json()) == final


def test_unknown_job_is_404(api: httpx.Client) -> None:
    assert api.get("/jobs/no-such-job").status_code == 404
    assert api.get("/rollout/task/no-such-task").status_code == 404


@pytest.mark.parametrize(
    ("instance", "field"),
    [
        ({"handler": "nope", "question": "q", "answer": "1"}, ["body", "instance", "handler"]),
        ({"question": "q", "answer": "1"}, ["body", "instance", "handler"]),
        ({"handler": "math", "answer": "1"}, ["body", "instance", "question"]),
        ({"handler": "math", "question": ["not", "text"], "answer": "1"}, ["body", "instance", "question"]),
        (
            {"handler": "math", "question": "q", "answer": "1", "max_turns": "many"},
            ["body", "instance", "max_turns"],
        ),
    ],
)
def test_bad_instance_is_422_naming_the_field_and_queues_nothing(
    api: httpx.Client, instance: dict, field: list[str]
) -> None:
    before = api.get("/status").json()["jobs"]
    job_id = f"bad-{uuid.uuid4().hex[:8]}"
    response = api.post("/process", json={"instance": instance, "job_id": job_id})
    assert response.status_code == 422, response.text
    assert field in [err["loc"] for err in response.json()["detail"]]
    assert api.get(f"/jobs/{job_id}").status_code == 404
    assert api.get("/status").json()["jobs"].get("queued", 0) <= before.get("queued", 0)


def test_bad_sampling_params_and_task_fields_are_422(api: httpx.Client) -> None:
    response = api.post("/process", json={"instance": PROBLEM, "sampling_params": {"temperature": -1}})
    assert response.status_code == 422
    assert ["body", "sampling_params", "temperature"] in [e["loc"] for e in response.json()["detail"]]
    response = api.post("/rollout/task/submit", json={"task_id": "x", "instance": PROBLEM, "num_samples": 0})
    assert ["body", "num_samples"] in [e["loc"] for e in response.json()["detail"]]


def test_backends_spread_least_first_and_each_job_sticks_to_one(api: httpx.Client, farm: LocalFarm) -> None:
    servers = api.get("/llm_servers").json()
    assert [s["address"] for s in servers] == farm.llm_urls
    assert {s["assigned"] for s in servers} == {0}  # finished jobs release their backend
    # Nine jobs that each pin a backend (one generation) and then hold it for a while.
    probe = {"handler": "noop", "generate_tokens": 4, "run_s": 3}
    ids = [f"spread-{uuid.uuid4().hex[:6]}-{i}" for i in range(9)]
    for job_id in ids:
        assert (
            api.post("/process", json={"instance": probe, "job_id": job_id, "wait": False}).status_code == 202
        )
    assigned = wait_until(
        lambda: {s["address"]: s["assigned"] for s in api.get("/llm_servers").json()},
        30,
        accept=lambda spread: sum(spread.values()) >= 9,
        interval_s=0.05,
        what="all nine jobs holding a backend",
    )
    assert assigned == {u: 3 for u in farm.llm_urls}
    results = [
        JobResult.model_validate(api.post("/process", json={"instance": probe, "job_id": j}).json())
        for j in ids
    ]
    assert Counter(r.artifacts["backend"] for r in results) == {url: 3 for url in farm.llm_urls}
    # Every call of one multi-turn job goes to the same backend.
    for _ in range(3):
        trace = process(api, sampling_params={"max_tokens": 256}).trajectory.traces[0]
        assert len(trace.metadata["backends"]) == 1 and trace.metadata["tool_calls"] >= 1


def test_status_metrics_health_and_openapi(api: httpx.Client) -> None:
    status = api.get("/status").json()
    assert set(status["queues"]) >= {"init", "run", "eval"}
    assert {w["node"] for w in status["workers"]}
    assert any(q.startswith("run.") for w in status["workers"] for q in w["queues"])
    assert api.get("/healthz").json() == {"ok": True}
    metrics = api.get("/metrics").text
    assert "farm_jobs_finished_total" in metrics and "farm_stage_seconds_total" in metrics
    # sandbox counts arrive with the workers' heartbeats (every 5 s)
    wait_until(
        lambda: "farm_sandboxes{" in api.get("/metrics").text, 12, interval_s=0.2, what="farm_sandboxes"
    )
    paths = api.get("/openapi.json").json()["paths"]
    for path in [
        "/process",
        "/jobs/{job_id}",
        "/cancel",
        "/add_llm_server",
        "/clear_llm_server",
        "/llm_servers",
        "/start",
        "/stop",
        "/status",
        "/healthz",
        "/metrics",
        "/rollout/task/submit",
        "/rollout/task/{task_id}",
        "/rollout/status",
    ]:
        assert path in paths, path
    before = api.get("/rollout/status").json()
    task = {"task_id": f"t-{uuid.uuid4().hex[:8]}", "instance": {"handler": "noop"}, "num_samples": 1}
    assert api.post("/rollout/task/submit", json=task).status_code == 200
    rollout = api.get("/rollout/status").json()
    assert rollout["tasks"] == before["tasks"] + 1 and rollout["nodes"]  # a count, not just a number


def test_math_job_with_the_sandboxed_ipython_kernel(api: httpx.Client) -> None:
    instance = {**PROBLEM, "python": "ipython", "tool_timeout_s": 60}
    response = api.post(
        "/process", json={"instance": instance, "sampling_params": {"max_tokens": 256, "seed": 3}}
    )
    result = JobResult.model_validate(response.json())
    assert result.state is JobState.done, result.error
    tool_replies = [m for m in result.trajectory.traces[0].response_messages if m["role"] == "tool"]
    assert tool_replies and tool_replies[0]["content"].strip().lstrip("-").isdigit(), tool_replies
    assert_token_faithful(result)
