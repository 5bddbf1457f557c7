"""Groups with a deadline in the DAPO bookkeeping (farm/client/groups.py), on a clock the test moves."""

from __future__ import annotations

from farm.client.groups import FailurePolicy, GroupBook, JobSpec, StragglerPolicy
from farm.models import JobResult, JobState, StageError


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def done(spec: JobSpec, reward: float) -> JobResult:
    return JobResult(job_id=spec.job_id, state=JobState.done, handler="h", reward=reward)


def lost(spec: JobSpec) -> JobResult:
    error = StageError(stage="eval", type="SandboxError", message="sandbox lost")
    return JobResult(job_id=spec.job_id, state=JobState.failed, handler="h", error=error)


def test_a_hanging_sample_is_cancelled_at_the_deadline_and_the_group_delivered() -> None:
    clock = Clock()
    book = GroupBook(4, run_id="r", deadline_s=5.0, clock=clock)
    book.open_group({}, 0)
    specs = book.next_submissions(8)
    for spec, reward in zip(specs[:3], [1.0, 0.0, 1.0], strict=True):
        assert book.record(done(spec, reward)) == []
    assert book.next_deadline() == 5.0
    clock.now = 4.9
    assert book.deliver_expired() == [] and book.ready_count == 0
    clock.now = 5.0
    assert book.deliver_expired() == [specs[3].job_id]
    [group] = book.take(1)
    assert group.delivered_reason == "deadline" and group.slots == [0, 1, 2]
    assert group.stragglers == [specs[3].job_id] and group.rewards == [1.0, 0.0, 1.0]
    assert book.counters.delivered_deadline == 1 and book.counters.stragglers_cancelled == 1
    assert book.idle() and book.next_deadline() is None


def test_min_usable_delivers_early_and_finish_leaves_the_straggler_running() -> None:
    book = GroupBook(3, run_id="r", min_usable=2, stragglers=StragglerPolicy.finish)
    book.open_group({}, 0)
    a, b, c = book.next_submissions(3)
    book.record(done(a, 1.0))
    assert book.record(done(b, 0.0)) == []  # delivered, c left to finish
    [group] = book.take(1)
    assert group.delivered_reason == "min_usable" and group.stragglers == [c.job_id]
    assert book.in_flight == [c.job_id]  # still counts against the concurrency budget
    assert book.record(done(c, 1.0)) == [] and book.idle()
    assert book.counters.stragglers_left == 1 and book.ready_count == 0


def test_an_abandoned_call_cancels_stragglers_left_to_finish() -> None:
    book = GroupBook(
        2, run_id="r", min_usable=1, stragglers=StragglerPolicy.finish, filter_zero_variance=False
    )
    book.open_group({}, 0)
    a, b = book.next_submissions(2)
    book.record(done(a, 1.0))
    assert book.abandon() == [b.job_id]


def test_an_infra_failure_reruns_one_sample_and_the_group_says_so() -> None:
    book = GroupBook(8, run_id="r", failure_policy=FailurePolicy.zero, max_retries=2)
    book.open_group({}, 0)
    specs = book.next_submissions(8)
    assert book.record(lost(specs[5])) == []
    [rerun] = book.next_submissions(8)
    assert rerun.slot == 5 and rerun.attempt == 1
    for spec in specs[:5] + specs[6:] + [rerun]:
        book.record(done(spec, float(spec.slot % 2)))
    [group] = book.take(1)
    assert group.delivered_reason == "complete" and len(group.results) == 8
    assert [(r.slot, r.job_id, r.replaced, r.reason, r.infrastructure) for r in group.reruns] == [
        (5, rerun.job_id, specs[5].job_id, "SandboxError", True)
    ]
    assert book.counters.submitted == 9  # one sample re-run, not the group


def test_a_deadline_with_no_result_drops_the_group() -> None:
    clock = Clock()
    book = GroupBook(2, run_id="r", deadline_s=1.0, clock=clock)
    book.open_group({}, 0)
    specs = book.next_submissions(2)
    clock.now = 2.0
    assert sorted(book.deliver_expired()) == sorted(s.job_id for s in specs)
    assert book.counters.dropped_deadline == 1 and book.ready_count == 0


def test_a_task_sent_without_group_fields_does_not_carry_their_defaults() -> None:
    """A newer client can still submit plain tasks to an older farm (TaskRequest forbids unknown fields)."""
    from farm.client import calls

    plain = calls.submit_task({"task_id": "t", "instruction": "x"}).json
    assert not {"stragglers", "infra_reruns", "min_usable", "deadline_s"} & set(plain)
    group = calls.submit_task(
        {"task_id": "t", "instruction": "x", "deadline_s": 3, "stragglers": "finish"}
    ).json
    assert group["deadline_s"] == 3 and group["stragglers"] == "finish" and "infra_reruns" not in group
