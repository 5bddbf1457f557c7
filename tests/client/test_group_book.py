"""The DAPO bookkeeping without a server: grouping, filtering, failure policies, staleness."""

from __future__ import annotations

import itertools
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from farm.client.groups import FailurePolicy, GroupBook, JobSpec
from farm.models import JobResult, JobState


def done(spec: JobSpec, reward: float) -> JobResult:
    return JobResult(job_id=spec.job_id, state=JobState.done, handler="h", reward=reward)


def failed(spec: JobSpec) -> JobResult:
    return JobResult(job_id=spec.job_id, state=JobState.failed, handler="h")


def test_group_closes_after_n_and_zero_variance_is_dropped() -> None:
    book = GroupBook(2, run_id="r")
    book.open_group({"q": 1}, 0)
    book.open_group({"q": 2}, 1)
    a0, a1, b0, b1 = book.next_submissions(10)
    for spec, reward in [(a0, 1.0), (b0, 0.0), (a1, 1.0), (b1, 1.0)]:
        assert book.record(done(spec, reward)) == []
    assert book.counters.dropped_zero_variance == 1
    [group] = book.take(5)
    assert group.instance == {"q": 2}
    assert group.rewards == [0.0, 1.0]
    assert [r.job_id for r in group.results] == [b0.job_id, b1.job_id]
    assert group.informative


def test_grpo_mode_keeps_zero_variance_groups() -> None:
    book = GroupBook(1, run_id="r", filter_zero_variance=False)
    book.open_group({"q": 1}, 0)
    [spec] = book.next_submissions(4)
    book.record(done(spec, 1.0))
    assert book.ready_count == 1


def test_filtering_needs_two_samples() -> None:
    with pytest.raises(ValueError):
        GroupBook(1, run_id="r")


def test_budget_bounds_in_flight_and_pending_waits() -> None:
    book = GroupBook(4, run_id="r")
    book.open_group({}, 0)
    book.open_group({}, 1)
    first = book.next_submissions(3)
    assert len(first) == 3 and len(book.in_flight) == 3 and book.pending_count == 5
    assert not book.wants_new_group(3)
    book.record(done(first[0], 1.0))
    assert [s.job_id for s in book.next_submissions(3)] == ["r-g0-s3"]


def test_drop_policy_cancels_siblings_at_first_failure() -> None:
    book = GroupBook(3, run_id="r", failure_policy=FailurePolicy.drop)
    book.open_group({}, 0)
    s0, s1 = book.next_submissions(2)
    cancel = book.record(failed(s0))
    assert cancel == [s1.job_id]
    assert book.idle() and book.counters.dropped_failed == 1 and book.counters.cancelled == 1
    assert book.record(done(s1, 1.0)) == []  # a late answer for a cancelled job is ignored


def test_zero_policy_counts_failure_as_zero_reward() -> None:
    book = GroupBook(2, run_id="r", failure_policy=FailurePolicy.zero)
    book.open_group({}, 0)
    s0, s1 = book.next_submissions(2)
    book.record(failed(s0))
    book.record(done(s1, 1.0))
    [group] = book.take(1)
    assert group.rewards == [0.0, 1.0]
    assert group.results[0].state is JobState.failed


def test_retry_policy_resubmits_first_then_gives_up() -> None:
    book = GroupBook(2, run_id="r", failure_policy=FailurePolicy.retry, max_retries=1)
    book.open_group({}, 0)
    book.open_group({}, 1)
    s0, _ = book.next_submissions(2)
    book.record(failed(s0))
    [retry] = book.next_submissions(2)
    assert retry.job_id == "r-g0-s0-r1" and retry.attempt == 1 and retry.slot == 0
    assert retry.metadata["attempt"] == 1
    book.record(failed(retry))
    assert book.counters.retried == 1 and book.counters.dropped_failed == 1


def test_submit_refusal_goes_through_the_failure_policy() -> None:
    from farm.models import StageError

    book = GroupBook(2, run_id="r", failure_policy=FailurePolicy.drop)
    book.open_group({"handler": "h"}, 0)
    s0, s1 = book.next_submissions(2)
    assert book.record_submit_failure(s0, StageError(stage="api", type="http_422", message="bad")) == [
        s1.job_id
    ]


def test_policy_version_is_stamped_and_stale_work_dropped() -> None:
    book = GroupBook(2, run_id="r", filter_zero_variance=False)
    book.policy_version = 3
    book.open_group({}, 0)
    old = book.next_submissions(1)
    book.record(done(old[0], 1.0))
    book.record(done(book.next_submissions(1)[0], 1.0))  # group 0 ready at version 3
    book.open_group({}, 1)
    in_flight = book.next_submissions(2)
    assert in_flight[0].metadata["policy_version"] == 3
    book.policy_version = 4
    book.open_group({}, 2)
    assert book.drop_stale(4, max_staleness=1) == []
    assert sorted(book.drop_stale(5, max_staleness=1)) == sorted(s.job_id for s in in_flight)
    assert book.ready_count == 0 and book.counters.dropped_stale == 2
    assert book.open_group_count == 1  # the version-4 group stays
    assert book.drop_stale(9, max_staleness=None) == []


def test_abandon_returns_every_live_job_and_discards_surplus() -> None:
    book = GroupBook(2, run_id="r", filter_zero_variance=False)
    book.open_group({}, 0)
    book.open_group({}, 1)
    specs = book.next_submissions(3)
    book.record(done(specs[0], 0.0))
    book.record(done(specs[1], 0.0))
    assert book.abandon() == [specs[2].job_id]
    assert book.idle() and book.ready_count == 0 and book.counters.discarded_ready == 1


outcome = st.one_of(st.just("fail"), st.sampled_from([0.0, 1.0]))


@settings(max_examples=150, deadline=None)
@given(
    n=st.integers(2, 5),
    budget=st.integers(1, 12),
    k=st.integers(1, 6),
    policy=st.sampled_from(list(FailurePolicy)),
    outcomes=st.lists(outcome, min_size=1, max_size=60),
    seed=st.integers(0, 2**16),
)
def test_simulated_runs_keep_the_invariants(
    n: int, budget: int, k: int, policy: FailurePolicy, outcomes: list[object], seed: int
) -> None:
    rng = random.Random(seed)
    book = GroupBook(n, run_id="r", failure_policy=policy, max_retries=2)
    draws = itertools.cycle(outcomes)
    prompts = 0
    for _ in range(2000):
        if book.ready_count >= k:
            break
        while book.wants_new_group(budget) and prompts < 40:
            book.open_group({"i": prompts}, prompts)
            prompts += 1
        book.next_submissions(budget)
        assert len(book.in_flight) <= budget
        if book.idle():
            break
        job_id = rng.choice(book.in_flight)
        spec = JobSpec(job_id, "", 0, 0, {}, {})
        draw = next(draws)
        book.record(failed(spec) if draw == "fail" else done(spec, float(draw)))  # type: ignore[arg-type]
    c = book.counters
    assert c.groups_opened == (
        c.groups_accepted + c.dropped_zero_variance + c.dropped_failed + book.open_group_count
    )
    assert c.submitted == c.completed + len(book.in_flight) + c.cancelled
    if policy is not FailurePolicy.retry:
        assert c.retried == 0
    if policy is FailurePolicy.zero:
        assert c.dropped_failed == 0
    for group in book.take(k):
        assert len(group.results) == n == len(group.rewards)
        assert group.informative
        assert len({r.job_id for r in group.results}) == n
        if policy is not FailurePolicy.zero:
            assert all(r.state is JobState.done for r in group.results)


def test_job_seeds_are_distinct_and_repeatable() -> None:
    from farm.client.dapo import job_seed

    specs = [
        JobSpec(f"j{p}-{slot}-{a}", "g", slot, a, {}, {"prompt_index": p})
        for p in range(30)
        for slot in range(8)
        for a in range(3)
    ]
    seeds = [job_seed(7, spec) for spec in specs]
    assert len(set(seeds)) == len(seeds)
    assert seeds == [job_seed(7, spec) for spec in specs]
    assert all(0 <= seed < 2**31 for seed in seeds)
