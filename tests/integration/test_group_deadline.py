"""Groups with a deadline and staleness at assembly through the task API and the DAPO consumer, on the
session farm (real API, Celery workers, Redis).

A group with one sample that never ends is delivered at its deadline with the others (the straggler
cancelled and named); an infrastructure failure in a group of 8 re-runs that one sample, not the group,
and the group's record says which and why.
"""

from __future__ import annotations

import itertools
import time
from typing import Any

import httpx
import pytest

from farm.client import DapoConfig, DapoConsumer, FailurePolicy, StaleSamples
from farm.launcher import LocalFarm
from farm.models import JobState
from tests.waiting import wait_until


def _task(api: httpx.Client, task_id: str, **fields: Any) -> dict[str, Any]:
    response = api.post("/rollout/task/submit", json={"task_id": task_id, **fields})
    assert response.status_code == 200, response.text
    return dict(response.json())


def _watch(api: httpx.Client, task_id: str, timeout_s: float) -> dict[str, Any]:
    """The task's status once its group is delivered (a read settles the group too, as the background
    settler does every GROUP_TICK_S)."""
    found: dict[str, Any] | None = None

    def delivered() -> bool:
        nonlocal found
        raw = api.get(f"/rollout/task/{task_id}").json()
        found = raw if raw["group"]["delivered"] else None
        return found is not None

    wait_until(delivered, timeout_s, what=f"group {task_id} delivered", interval_s=0.1)
    assert found is not None
    return found


def test_a_group_with_a_never_ending_sample_is_delivered_at_its_deadline(api: httpx.Client) -> None:
    task_id = f"grp-deadline-{time.time_ns()}"
    instance = {"run_s": 3600, "only_samples": [2]}  # sample 2 never ends by itself
    started = time.time()
    _task(api, task_id, instance=instance, agent={"handler": "noop"}, num_samples=4, deadline_s=2.0)
    status = _watch(api, task_id, 30)
    group = status["group"]
    assert group["delivered_reason"] == "deadline"
    assert group["delivered_at"] - started >= 1.9, group  # not before the deadline
    assert group["delivered_at"] - group["deadline_at"] < 2.0, group  # and kept to within the settler's tick
    assert group["usable"] == 3 and len(group["usable_session_ids"]) == 3
    assert group["stragglers"] == [f"{task_id}~2"] and group["straggler_policy"] == "cancel"
    wait_until(
        lambda: api.get(f"/rollout/task/{task_id}").json()["state"] == "completed",
        15,
        what="the straggler cancelled",
    )
    sessions = {s["session_id"]: s for s in api.get(f"/rollout/task/{task_id}").json()["sessions"]}
    assert sessions[f"{task_id}~2"]["state"] == "cancelled"
    assert sorted(s["state"] for s in sessions.values()) == ["cancelled", "done", "done", "done"]


def test_a_group_is_delivered_once_min_usable_sessions_are_in(api: httpx.Client) -> None:
    task_id = f"grp-min-{time.time_ns()}"
    instance = {"run_s": 3600, "only_samples": [0]}
    _task(
        api, task_id, instance=instance, agent={"handler": "noop"}, num_samples=3, min_usable=2, deadline_s=60
    )
    group = _watch(api, task_id, 20)["group"]
    assert group["delivered_reason"] == "min_usable" and group["usable"] == 2
    assert group["stragglers"] == [f"{task_id}~0"]


def test_an_infra_failure_in_a_group_of_8_reruns_that_one_sample(api: httpx.Client) -> None:
    task_id = f"grp-rerun-{time.time_ns()}"
    instance = {"fail_stage": "run", "fail_as": "sandbox_lost", "only_samples": [5]}
    _task(api, task_id, instance=instance, agent={"handler": "noop"}, num_samples=8, infra_reruns=2)
    status = _watch(api, task_id, 30)
    group = status["group"]
    assert group["delivered_reason"] == "complete" and group["usable"] == 8, group
    assert group["reruns"] == [
        {
            "sample_index": 5,
            "session_id": f"{task_id}~5~r1",
            "replaced": f"{task_id}~5",
            "reason": "SandboxError",
        }
    ]
    sessions = status["sessions"]
    assert [s["sample_index"] for s in sessions] == list(range(8))
    assert sessions[5]["session_id"] == f"{task_id}~5~r1" and sessions[5]["state"] == "done"
    assert sessions[5]["result"]["metadata"]["rerun_of"] == f"{task_id}~5"
    assert status["state"] == "completed"
    # the failed first session is still readable, with its failure class, and counted for the gauges
    first = api.get(f"/jobs/{task_id}~5").json()
    assert first["state"] == "failed" and first["error"]["type"] == "SandboxError"
    assert _metric(api, "farm_infra_failures_total", 'class="SandboxError"') >= 1


def test_a_task_without_group_fields_reads_as_before(api: httpx.Client) -> None:
    task_id = f"grp-none-{time.time_ns()}"
    _task(api, task_id, instance={}, agent={"handler": "noop"}, num_samples=2)
    wait_until(
        lambda: api.get(f"/rollout/task/{task_id}").json()["state"] == "completed", 20, what="the plain task"
    )
    assert api.get(f"/rollout/task/{task_id}").json()["group"] is None


def test_min_usable_above_num_samples_is_a_422_naming_the_field(api: httpx.Client) -> None:
    response = api.post(
        "/rollout/task/submit",
        json={
            "task_id": "grp-bad",
            "instance": {},
            "agent": {"handler": "noop"},
            "num_samples": 2,
            "min_usable": 3,
        },
    )
    assert response.status_code == 422
    assert "min_usable" in response.text


def test_the_dapo_consumer_delivers_a_group_at_its_deadline(api: httpx.Client, farm: LocalFarm) -> None:
    hanging = {"handler": "noop", "run_s": 3600, "only_samples": [1]}
    config = DapoConfig(
        n=4, concurrency=8, filter_zero_variance=False, group_deadline_s=3.0, carry_over=False
    )
    started = time.monotonic()
    with DapoConsumer(farm.api_url, itertools.repeat(hanging), config) as dapo:
        batch = dapo.next_batch(1, timeout_s=60)
    took = time.monotonic() - started
    [group] = batch.groups
    assert group.delivered_reason == "deadline" and group.slots == [0, 2, 3]
    assert batch.stats.delivered_deadline >= 1 and batch.stats.stragglers_cancelled >= 1
    assert 2.9 <= took < 15, took
    [straggler] = group.stragglers
    assert straggler.endswith("-s1")
    wait_until(lambda: api.get(f"/jobs/{straggler}").json()["state"] == "cancelled", 15, what="the straggler")


def test_the_dapo_consumer_reruns_one_infra_failed_sample(farm: LocalFarm) -> None:
    lost = {"handler": "noop", "fail_stage": "run", "fail_as": "sandbox_lost", "only_samples": [5]}
    config = DapoConfig(n=8, concurrency=8, filter_zero_variance=False, failure_policy=FailurePolicy.zero)
    with DapoConsumer(farm.api_url, itertools.repeat(lost), config) as dapo:
        batch = dapo.next_batch(1, timeout_s=60)
    [group] = batch.groups
    assert len(group.results) == 8 and all(r.state is JobState.done for r in group.results)
    [rerun] = group.reruns
    assert (rerun.slot, rerun.reason, rerun.infrastructure) == (5, "SandboxError", True)
    assert batch.stats.infra_failed == batch.stats.retried >= 1  # later groups of the call may lose one too


@pytest.mark.parametrize("mode", [StaleSamples.withhold, StaleSamples.discard])
def test_a_sample_stale_from_waiting_in_the_queue_is_withheld_or_discarded(
    farm: LocalFarm, mode: StaleSamples
) -> None:
    """Two groups are sampled at version 0; one is batched, the other is carried (in flight or in queue)
    while the trainer moves to version 1: at assembly its samples are one version old, past the bound 0."""
    config = DapoConfig(
        n=2,
        concurrency=4,
        filter_zero_variance=False,
        max_staleness=None,
        max_offpolicyness=0,
        stale_samples=mode,
    )
    with DapoConsumer(farm.api_url, itertools.repeat({"handler": "noop"}), config) as dapo:
        first = dapo.next_batch(1, policy_version=0, timeout_s=60)
        time.sleep(
            0.5
        )  # the carried group finishes at version 0 meanwhile (results come back on the next call)
        second = dapo.next_batch(1, policy_version=1, timeout_s=60)
    report = second.stats.staleness
    assert report is not None and report.stale_samples is mode
    counted = report.withheld if mode is StaleSamples.withhold else report.discarded
    other = report.discarded if mode is StaleSamples.withhold else report.withheld
    assert counted >= 2 and counted % 2 == 0 and other == 0, report
    assert report.dropped_groups >= 1
    assert [r.metadata["policy_version"] for g in second.groups for r in g.results] == [1, 1]
    assert report.in_queue.samples == 2 and report.in_queue.versions_max == 0
    assert first.stats.staleness is not None and first.stats.staleness.in_flight.seconds_max is not None
    # the consumer reported both lags and the stale samples to the farm's gauges
    with httpx.Client(base_url=farm.api_url, timeout=30) as api:
        run = f'run="{config.run_id}"'
        action = "withheld" if mode is StaleSamples.withhold else "discarded"
        assert _metric(api, "farm_offpolicy_lag_versions", run, 'phase="in_queue"', 'stat="max"') == 0
        assert _metric(api, "farm_offpolicy_lag_seconds", run, 'phase="in_flight"', 'stat="max"') > 0
        assert _metric(api, "farm_stale_samples_total", f'action="{action}"') >= counted


def _metric(api: httpx.Client, name: str, *labels: str) -> float:
    """The value of the sample of `name` whose labels include every one of `labels` (GET /metrics)."""
    for line in api.get("/metrics").text.splitlines():
        named = line.startswith(name + "{") or line.startswith(name + " ")
        if named and all(label in line for label in labels):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no sample {name} {labels}")


def test_cancelling_a_group_task_cancels_its_reruns_too(api: httpx.Client) -> None:
    task_id = f"grp-cancel-{time.time_ns()}"
    # sample 1 loses its sandbox at init and is re-run; a cancel of the task reaches the re-run as well
    instance = {"fail_stage": "init", "fail_as": "sandbox_lost", "only_samples": [1]}
    _task(api, task_id, instance=instance, agent={"handler": "noop"}, num_samples=2, infra_reruns=1)
    group = _watch(api, task_id, 30)["group"]
    assert [r["session_id"] for r in group["reruns"]] == [f"{task_id}~1~r1"]
    answer = api.post("/cancel", json={"task_id": task_id}).json()
    assert f"{task_id}~1~r1" in answer["states"], answer
