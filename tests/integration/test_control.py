"""Control paths over HTTP: cancel, stop/start, failing stages, timeouts and a checkpoint swap."""

from __future__ import annotations

import time
import uuid

import httpx
import pytest

from farm.launcher import LocalFarm
from farm.models.results import JobResult, JobState
from tests.integration.jobs import submit, wait_state
from tests.waiting import wait_until

pytestmark = pytest.mark.integration


def test_cancel_a_running_job(api: httpx.Client) -> None:
    job_id = submit(api, {"handler": "noop", "run_s": 30})
    assert wait_state(api, job_id, {"run"}).state is JobState.run
    asked = time.monotonic()
    response = api.post("/cancel", json={"job_id": job_id})
    assert response.status_code == 200 and response.json()["job_id"] == job_id
    result = wait_state(api, job_id, {"cancelled"}, timeout_s=5)
    assert result.state is JobState.cancelled
    assert time.monotonic() - asked < 1.0
    assert result.error is not None and result.error.stage == "run"
    again = api.post("/cancel", json={"job_id": job_id})  # idempotent
    assert again.json() == {"job_id": job_id, "state": "cancelled"}


def test_cancel_unknown_job_is_404(api: httpx.Client) -> None:
    assert api.post("/cancel", json={"job_id": "never-submitted"}).status_code == 404


def test_cancel_by_task_and_by_stale_policy_version(api: httpx.Client) -> None:
    task_id = f"task-{uuid.uuid4().hex[:8]}"
    body = {"task_id": task_id, "instance": {"handler": "noop", "run_s": 30}, "num_samples": 3}
    sessions = api.post("/rollout/task/submit", json=body).json()["session_ids"]
    cancelled = api.post("/cancel", json={"task_id": task_id}).json()
    assert sorted(cancelled["cancelled"]) == sorted(sessions)
    for session in sessions:
        assert wait_state(api, session, {"cancelled"}, timeout_s=10).state is JobState.cancelled

    old = submit(api, {"handler": "noop", "run_s": 30}, metadata={"policy_version": 3})
    new = submit(api, {"handler": "noop", "run_s": 0.5}, metadata={"policy_version": 5})
    api.post("/cancel", json={"older_than_policy_version": 5})
    assert wait_state(api, old, {"cancelled"}, timeout_s=10).state is JobState.cancelled
    assert wait_state(api, new, {"done"}, timeout_s=10).state is JobState.done


@pytest.mark.parametrize("stage", ["init", "run", "eval"])
def test_a_failing_stage_becomes_a_well_formed_result(api: httpx.Client, stage: str) -> None:
    response = api.post("/process", json={"instance": {"handler": "noop", "fail_stage": stage}})
    assert response.status_code == 200
    result = JobResult.model_validate(response.json())
    assert result.state is JobState.failed
    assert result.error is not None
    assert (result.error.stage, result.error.type) == (stage, "StageFailure")
    assert "on purpose" in result.error.message


def test_timeout_counts_only_time_in_stages(api: httpx.Client) -> None:
    response = api.post("/process", json={"instance": {"handler": "noop", "run_s": 5}, "timeout_s": 0.5})
    result = JobResult.model_validate(response.json())
    assert result.state is JobState.timeout
    assert result.timings.run == pytest.approx(0.5, abs=0.3)
    assert result.timings.in_stages < 1.0


def test_stop_refuses_work_and_cancels_in_flight_then_start_resumes(api: httpx.Client) -> None:
    running = submit(api, {"handler": "noop", "run_s": 30})
    assert wait_state(api, running, {"run"}).state is JobState.run
    try:
        stopped = api.post("/stop").json()
        assert stopped["accepting"] is False and stopped["cancelled"] >= 1
        refused = api.post("/process", json={"instance": {"handler": "noop"}})
        assert refused.status_code == 503
        assert wait_state(api, running, {"cancelled"}, timeout_s=5).state is JobState.cancelled
    finally:
        assert api.post("/start").json() == {"accepting": True}
    done = api.post("/process", json={"instance": {"handler": "noop"}})
    assert done.status_code == 200 and done.json()["state"] == "done"


def test_remove_one_backend_while_jobs_run(api: httpx.Client, farm: LocalFarm) -> None:
    instance = {"handler": "math", "question": "What is 84 * 76 + 123?", "answer": "6507"}
    jobs = [submit(api, instance, sampling_params={"max_tokens": 256}) for _ in range(6)]
    gone = farm.llm_urls[0]
    try:
        left = api.post("/remove_llm_server", json={"address": gone})
        assert left.status_code == 200, left.text
        assert gone not in {b["address"] for b in left.json()} and len(left.json()) == len(farm.llm_urls) - 1
        assert api.post("/remove_llm_server", json={"address": gone}).status_code == 404
        results = [wait_state(api, job, {"done", "failed", "timeout", "cancelled"}) for job in jobs]
        assert [r.state for r in results] == [JobState.done] * len(jobs), [r.error for r in results]
    finally:
        # the pool as the farm made it, in its order (a re-added address is listed last otherwise, and
        # tests after this one, in whatever order a test process runs them, read the listing)
        api.post("/clear_llm_server").raise_for_status()
        for url in farm.llm_urls:
            api.post("/add_llm_server", json={"address": url}).raise_for_status()


def test_checkpoint_swap_breaks_no_job_in_flight(api: httpx.Client, farm: LocalFarm) -> None:
    instance = {"handler": "math", "question": "What is 84 * 76 + 123?", "answer": "6507"}
    jobs = [submit(api, instance, sampling_params={"max_tokens": 256}) for _ in range(6)]
    try:
        api.post("/clear_llm_server").raise_for_status()
        assert api.get("/llm_servers").json() == []
        # the swap happens with jobs in flight: one at least is in its run stage, waiting for a backend
        wait_until(
            lambda: [api.get(f"/jobs/{job}").json()["state"] for job in jobs],
            10,
            accept=lambda states: "run" in states,
            interval_s=0.02,
            what="a job in its run stage",
        )
    finally:
        for url in farm.llm_urls:
            api.post("/add_llm_server", json={"address": url}).raise_for_status()
    results = [wait_state(api, job, {"done", "failed", "timeout", "cancelled"}) for job in jobs]
    assert [r.state for r in results] == [JobState.done] * len(jobs), [r.error for r in results]
    assert {b["assigned"] for b in api.get("/llm_servers").json()} == {0}
