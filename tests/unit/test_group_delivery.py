"""The rules of group delivery and per-sample re-runs (farm/jobs/group_delivery.py), without a farm."""

from __future__ import annotations

from farm.jobs.group_delivery import Slot, decide, rerun_id, stragglers
from farm.models.results import JobResult, JobState, StageError


def _slot(
    index: int, state: JobState | None, *, reward: float | None = 1.0, error: str = "", reruns: int = 0
) -> Slot:
    result = None
    if state is not None and state.terminal:
        failure = StageError(stage="run", type=error, message="x") if error else None
        result = JobResult(
            job_id=f"t~{index}",
            state=state,
            handler="noop",
            reward=reward if state is JobState.done else None,
            error=failure,
        )
    return Slot(index, f"t~{index}", state, result, reruns)


def test_an_infra_failure_reruns_that_sample_only_within_its_budget() -> None:
    slots = [
        _slot(0, JobState.done),
        _slot(1, JobState.failed, error="SandboxError"),
        _slot(2, JobState.run),
    ]
    decision = decide(slots, min_usable=3, max_reruns=1, deadline_at=None, now=0)
    assert decision.reruns == [(1, "SandboxError")] and decision.deliver is None
    spent = [*slots[:1], _slot(1, JobState.failed, error="SandboxError", reruns=1), slots[2]]
    assert decide(spent, min_usable=3, max_reruns=1, deadline_at=None, now=0).reruns == []


def test_a_policy_failure_is_never_rerun() -> None:
    slots = [_slot(0, JobState.done), _slot(1, JobState.failed, error="ValueError")]
    decision = decide(slots, min_usable=2, max_reruns=3, deadline_at=None, now=0)
    assert decision.reruns == [] and decision.deliver == "complete"


def test_delivery_reasons() -> None:
    running = [_slot(0, JobState.done), _slot(1, JobState.done), _slot(2, JobState.run)]
    assert decide(running, min_usable=2, max_reruns=0, deadline_at=None, now=0).deliver == "min_usable"
    assert decide(running, min_usable=3, max_reruns=0, deadline_at=10, now=9.9).deliver is None
    assert decide(running, min_usable=3, max_reruns=0, deadline_at=10, now=10).deliver == "deadline"
    assert stragglers(running) == ["t~2"]
    every = [_slot(0, JobState.done), _slot(1, JobState.done)]
    assert decide(every, min_usable=2, max_reruns=0, deadline_at=None, now=0).deliver == "complete"


def test_a_sample_being_rerun_holds_delivery_until_the_deadline() -> None:
    slots = [_slot(0, JobState.done), _slot(1, JobState.failed, error="WorkerLost")]
    assert decide(slots, min_usable=2, max_reruns=1, deadline_at=5, now=1).deliver is None
    assert decide(slots, min_usable=2, max_reruns=1, deadline_at=5, now=5).deliver == "deadline"


def test_rerun_ids_cannot_collide_with_sessions() -> None:
    assert rerun_id("t~3", 2) == "t~3~r2"
