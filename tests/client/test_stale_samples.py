"""The off-policy bound at assembly with withhold or discard, and the lag split into in flight and in
queue (farm/client/staleness.py): pure logic."""

from __future__ import annotations

from farm.client.groups import Group, SampleTimes
from farm.client.staleness import StaleSamples, bounded, queue_lags
from farm.models import JobResult, JobState, Trace, Trajectory


def _result(job_id: str, turns: list[int], reward: float) -> JobResult:
    trace = Trace(
        prompt_ids=[1],
        response_ids=[],
        loss_mask=[],
        response_logprobs=[],
        metadata={"turn_policy_versions": turns},
    )
    return JobResult(
        job_id=job_id,
        state=JobState.done,
        handler="math",
        reward=reward,
        trajectory=Trajectory(traces=[trace]),
    )


def _group() -> Group:
    results = [_result("old", [1, 2], 1.0), _result("new", [3], 0.0), _result("mid", [3, 3], 1.0)]
    times = [
        SampleTimes(submitted_at=0.0, finished_at=10.0, finished_version=2),
        SampleTimes(submitted_at=5.0, finished_at=6.0, finished_version=3),
        SampleTimes(submitted_at=1.0, finished_at=8.0, finished_version=3),
    ]
    return Group(
        group_id="g",
        prompt_index=0,
        instance={},
        policy_version=1,
        results=results,
        rewards=[r.reward or 0.0 for r in results],
        slots=[0, 1, 2],
        times=times,
    )


def test_withhold_keeps_the_reward_in_the_baseline_and_ships_no_tokens() -> None:
    shaped, withheld, discarded = bounded(_group(), 4, 2, StaleSamples.withhold, filter_zero_variance=True)
    assert shaped is not None and (withheld, discarded) == (1, 0)
    assert [r.job_id for r in shaped.results] == ["new", "mid"] and shaped.slots == [1, 2]
    assert [r.job_id for r in shaped.withheld_results] == ["old"] and shaped.withheld_rewards == [1.0]
    assert shaped.baseline == 2 / 3  # the withheld 1.0 still counts


def test_discard_takes_the_sample_out_of_its_group() -> None:
    shaped, withheld, discarded = bounded(_group(), 4, 2, StaleSamples.discard, filter_zero_variance=True)
    assert shaped is not None and (withheld, discarded) == (0, 1)
    assert [r.job_id for r in shaped.results] == ["new", "mid"] and shaped.withheld_results == []
    assert shaped.baseline == 0.5


def test_drop_group_is_the_old_behaviour_and_fresh_groups_pass_untouched() -> None:
    assert bounded(_group(), 4, 2, StaleSamples.drop_group, filter_zero_variance=True) == (None, 0, 0)
    group = _group()
    assert bounded(group, 4, 3, StaleSamples.withhold, filter_zero_variance=True) == (group, 0, 0)
    assert bounded(group, None, 0, StaleSamples.withhold, filter_zero_variance=True) == (group, 0, 0)


def test_a_group_left_without_signal_is_dropped_but_its_samples_counted() -> None:
    # bound 0 at version 4: only none is fresh -> nothing to ship
    assert bounded(_group(), 4, 0, StaleSamples.withhold, filter_zero_variance=False) == (None, 3, 0)
    # discarding "old" leaves rewards 0.0 and 1.0: informative, kept; at bound 0 with filtering, none left
    assert bounded(_group(), 4, 0, StaleSamples.discard, filter_zero_variance=True) == (None, 0, 3)


def test_the_lag_splits_into_in_flight_and_in_queue() -> None:
    in_flight, in_queue = queue_lags([_group()], 4, assembled_at=12.0)
    # versions: old 2-1=1, new 3-3=0, mid 3-3=0 in flight; 4-2=2, 4-3=1, 4-3=1 in queue
    assert (in_flight.versions_max, in_flight.versions_mean) == (1, 1 / 3)
    assert (in_queue.versions_max, in_queue.versions_mean) == (2, 4 / 3)
    assert (in_flight.seconds_max, in_queue.seconds_max) == (10.0, 6.0)
    assert in_flight.samples == in_queue.samples == 3
