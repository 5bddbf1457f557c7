"""Infrastructure failures never become rewards on the trainer's side: the DAPO consumer never scores them
0 (whatever its failure policy) and counts them in its stats; the adapters leave their traces out of every
trainer's batch and count them (farm.models.failures names the classes).

Before, `FailurePolicy.zero` put a 0.0 in the group for a job whose sandbox was lost, and `to_verl` /
`to_skyrl` turned a failed job's traces into samples with reward 0.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from farm.adapters import (
    flatten,
    infrastructure_failures,
    to_nemo_rl,
    to_skyrl,
    to_slime_samples,
    to_verl,
)
from farm.client import DapoConfig, DapoConsumer, FailurePolicy
from farm.client.groups import GroupBook
from farm.client.polling import PollPolicy
from farm.models import JobResult, JobState, StageError, Trace, Trajectory
from farm.models.failures import INFRASTRUCTURE_FAILURES, infrastructure_failure

FAST_POLL = PollPolicy(initial_s=0.005, maximum_s=0.05)
INFRA = sorted(INFRASTRUCTURE_FAILURES)


def _trace(reward: float | None, marker: int) -> Trace:
    return Trace(
        prompt_ids=[1, 2, marker],
        response_ids=[10, 11, 12],
        loss_mask=[1, 1, 1],
        response_logprobs=[-0.1, -0.2, -0.3],
        finish_reason="stop",
        reward=reward,
    )


def _result(job_id: str, group: str, state: JobState, kind: str | None, reward: float | None) -> JobResult:
    marker = int(job_id.rsplit("-", 1)[1])
    return JobResult(
        job_id=job_id,
        state=state,
        handler="code",
        reward=reward,
        error=StageError(stage="eval", type=kind, message="x") if kind else None,
        trajectory=Trajectory(traces=[_trace(reward, marker)]),
        metadata={"group_id": group},
    )


def _batch() -> list[JobResult]:
    return [
        _result("g0-1", "g0", JobState.done, None, 1.0),
        _result("g0-2", "g0", JobState.failed, "ExecServerError", None),  # the sandbox was lost
        _result("g0-3", "g0", JobState.done, None, 0.0),
        _result("g1-4", "g1", JobState.failed, "EvaluatorUnavailable", None),
        _result("g1-5", "g1", JobState.timeout, "timeout", None),  # the policy's own budget: kept as is
    ]


def test_the_adapters_leave_infrastructure_failures_out_and_count_them() -> None:
    results = _batch()
    assert infrastructure_failures(results) == {"ExecServerError": 1, "EvaluatorUnavailable": 1}
    kept = {s.job_id for s in flatten(results)}
    assert kept == {"g0-1", "g0-3", "g1-5"}

    verl = to_verl(results, pad_token_id=0)
    assert [row[-1] for row in verl["prompts"]] == [1, 3, 5]  # the rows of the kept jobs, in order
    assert list(verl["rewards"]) == [1.0, 0.0, 0.0]
    assert list(verl["uid"]) == ["g0", "g0", "g1"]

    skyrl = to_skyrl(results)
    assert [p[-1] for p in skyrl["prompt_token_ids"]] == [1, 3, 5]
    assert skyrl["rollout_metrics"]["rollout_metrics/infra_failed"] == 2
    assert skyrl["traj_idx"] == [0, 1, 2]

    assert [d["extra_env_info"]["job_id"] for d in to_nemo_rl(results)] == ["g0-1", "g0-3", "g1-5"]
    assert len(to_slime_samples(results)) == 3


@given(
    st.lists(
        st.one_of(st.just(None), st.sampled_from(["timeout", "ScriptedFailure", *INFRA])),
        min_size=1,
        max_size=24,
    ),
    st.sampled_from(list(FailurePolicy)),
)
def test_no_group_ever_scores_an_infrastructure_failure(
    outcomes: list[str | None], policy: FailurePolicy
) -> None:
    """Whatever fails how, under any policy: a group's rewards come only from jobs that are not
    infrastructure failures, and every infrastructure failure is counted once."""
    book = GroupBook(2, run_id="r", filter_zero_variance=False, failure_policy=policy, max_retries=1)
    feed = iter(outcomes)
    infra_seen = 0
    for _ in range(len(outcomes)):
        if book.idle():
            book.open_group({"handler": "h"}, 0)
        specs = book.next_submissions(1)
        if not specs:
            break
        spec = specs[0]
        kind = next(feed)
        state = JobState.done if kind is None else JobState.failed
        reward = float(spec.slot) if kind is None else None
        error = StageError(stage="eval", type=kind, message="x") if kind else None
        result = JobResult(
            job_id=spec.job_id, state=state, handler="h", reward=reward, error=error, metadata=spec.metadata
        )
        infra_seen += infrastructure_failure(result) is not None
        book.record(result)
    assert book.counters.infra_failed == infra_seen
    for group in book.take(1000):
        assert all(infrastructure_failure(r) is None for r in group.results)


def _prompts(**fields: Any) -> Iterator[dict[str, Any]]:
    for i in itertools.count():
        yield {"handler": "scripted", "duration_s": 0.02, "rewards": [0.0, 1.0, 1.0, 0.0], "i": i, **fields}


def test_the_zero_policy_retries_an_infrastructure_failure_and_counts_it(farm_url: str) -> None:
    """The first attempt of every sample loses its sandbox; under `zero` that is no reward: the sample is
    retried, the group holds only real scores, and the stats count the failures."""
    loader = _prompts(fail_attempts=1, fail_type="SandboxError")
    config = DapoConfig(n=4, concurrency=12, failure_policy=FailurePolicy.zero, max_retries=2)
    with DapoConsumer(farm_url, loader, config, poll=FAST_POLL) as dapo:
        batch = dapo.next_batch(k=2)
    assert len(batch.groups) == 2
    for group in batch.groups:
        assert all(r.state is JobState.done for r in group.results)
        assert group.rewards == [0.0, 1.0, 1.0, 0.0]
    assert batch.stats.infra_failed >= 8 and batch.stats.infra_failed == batch.stats.failed
    assert batch.stats.retried >= 8


def test_the_zero_policy_still_scores_the_policys_own_failures(farm_url: str) -> None:
    loader = _prompts(fail_slots=[1], rewards=[0.0, 9.0, 1.0, 1.0])
    config = DapoConfig(n=4, concurrency=12, failure_policy=FailurePolicy.zero)
    with DapoConsumer(farm_url, loader, config, poll=FAST_POLL) as dapo:
        batch = dapo.next_batch(k=1)
    assert batch.groups[0].rewards == [0.0, 0.0, 1.0, 1.0]
    assert batch.stats.infra_failed == 0
