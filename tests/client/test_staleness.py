"""Staleness of assembled batches from per-turn policy versions (farm/client/staleness.py) and the
per-turn recording itself (farm/agent/versions.py): pure logic, unit and property tests."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from farm.agent.versions import PolicyTooStale, TurnVersions, max_lag, parse_version
from farm.client import staleness
from farm.models import JobResult, JobState, Trace, Trajectory


def _result(turns: list[int | None] | None, submitted: int | None = None) -> JobResult:
    metadata = {} if turns is None else {"turn_policy_versions": turns}
    trace = Trace(prompt_ids=[1], response_ids=[], loss_mask=[], response_logprobs=[], metadata=metadata)
    return JobResult(
        job_id="j",
        state=JobState.done,
        handler="math",
        reward=1.0,
        trajectory=Trajectory(traces=[trace]),
        metadata={} if submitted is None else {"policy_version": submitted},
    )


def test_staleness_counts_from_the_oldest_turn() -> None:
    assert staleness.staleness(_result([3, 4, 5]), 5) == 2
    assert staleness.staleness(_result([None, 4]), 5) == 1  # a turn of unknown version is skipped
    assert staleness.staleness(_result(None, submitted=2), 5) == 3  # no per-turn record: submission
    assert staleness.staleness(_result(None), 5) is None


def test_report_histogram_mixed_and_bound() -> None:
    results = [_result([5, 5]), _result([4, 5]), _result([3]), _result(None)]
    report = staleness.report(results, 5, bound=1, dropped_groups=2)
    assert report.histogram == {0: 1, 1: 1, 2: 1}
    assert report.unknown == 1 and report.mixed == 1 and report.max == 2 and report.mean == 1.0
    assert report.dropped_groups == 2 and report.bound == 1
    assert not staleness.within(results, 5, 1)
    assert staleness.within(results, 5, 2) and staleness.within(results, None, 0)


@given(
    st.lists(st.lists(st.integers(0, 20), min_size=1, max_size=6), min_size=1, max_size=20),
    st.integers(0, 5),
)
def test_within_agrees_with_the_report(turns: list[list[int]], bound: int) -> None:
    current = max(max(t) for t in turns)
    results = [_result(list(t)) for t in turns]
    report = staleness.report(results, current, bound)
    assert sum(report.histogram.values()) == len(results)
    assert staleness.within(results, current, bound) == (report.max is not None and report.max <= bound)


def test_turn_versions_prefer_the_backend_and_say_where_from() -> None:
    turns = TurnVersions()
    turns.record("3", registered=2)  # SGLang's meta_info.weight_version
    turns.record("default", registered=2)  # never labelled: the pool registration
    turns.record(None, registered=None)
    meta = turns.metadata()
    assert meta["turn_policy_versions"] == [3, 2, None]
    assert meta["turn_policy_version_sources"] == ["backend", "pool", "unknown"]
    assert meta["policy_version_span"] == [2, 3]


def test_lag_bound_cancels_only_too_old_rollouts() -> None:
    turns = TurnVersions(max_lag=1)
    turns.check(5)  # no turn yet: nothing to be stale
    turns.record("4", None)
    turns.check(5)  # one behind: continue (a partial rollout)
    with pytest.raises(PolicyTooStale, match="max_policy_lag=1"):
        turns.check(6)
    TurnVersions(max_lag=None, versions=[0]).check(99)  # no bound: always continue


def test_versions_and_lag_settings_parse_strictly() -> None:
    assert [parse_version(v) for v in (3, "12", " 4 ", "v3", -1, True, None, 2.0)] == [
        3, 12, 4, None, None, None, None, None,
    ]  # fmt: skip
    assert max_lag({"max_policy_lag": 2}, None) == 2
    assert max_lag({"max_policy_lag": "2"}, 5) == 5 and max_lag({"max_policy_lag": True}, None) is None
    assert max_lag({}, 3) == 3 and max_lag({"max_policy_lag": -1}, None) is None


def test_viewer_labels_each_sampled_turn_with_its_version() -> None:
    from farm.ui.trajectory import segments

    trace = Trace(
        prompt_ids=[1],
        response_ids=[5, 6, 7, 8, 9, 10],
        loss_mask=[1, 1, 0, 0, 1, 1],
        response_logprobs=[-0.1, -0.2, 0.0, 0.0, -0.3, -0.4],
        metadata={"turn_policy_versions": [3, 4]},
    )
    shown = segments(trace, ["t"] * 6)
    assert [(s.mask, s.policy_version) for s in shown] == [(1, 3), (0, None), (1, 4)]
