"""Issue 34 item 4: a failure the rollout caused is the rollout's 0, the same for the trainer adapters and
the DAPO consumer: a sandbox ended for breaking its limit (`SandboxLimitExceeded`) and a job that spent its
own budget (`timeout`) are scored 0 under every failure policy, never retried, never left out; an
infrastructure failure is still never a reward."""

from __future__ import annotations

import pytest

from farm.adapters import infrastructure_failures
from farm.client import FailurePolicy
from farm.client.groups import GroupBook
from farm.models import JobResult, JobState, StageError
from farm.models.failures import rollout_failure

OUTCOMES = {
    "limit": (JobState.failed, "SandboxLimitExceeded"),
    "timeout": (JobState.timeout, "timeout"),
    "infra": (JobState.failed, "EvaluatorUnavailable"),
}


def failed(job_id: str, outcome: str, metadata: dict[str, object]) -> JobResult:
    state, kind = OUTCOMES[outcome]
    error = StageError(stage="run", type=kind, message="x")
    return JobResult(job_id=job_id, state=state, handler="h", error=error, metadata=metadata)


@pytest.mark.parametrize("policy", list(FailurePolicy))
@pytest.mark.parametrize("outcome", ["limit", "timeout"])
def test_the_rollouts_failure_is_its_zero_under_every_policy(policy: FailurePolicy, outcome: str) -> None:
    book = GroupBook(2, run_id="r", filter_zero_variance=False, failure_policy=policy, max_retries=2)
    book.open_group({"handler": "h"}, 0)
    first, second = book.next_submissions(2)
    book.record(failed(first.job_id, outcome, first.metadata))
    assert book.counters.retried == 0 and book.counters.dropped_failed == 0
    done = JobResult(
        job_id=second.job_id, state=JobState.done, handler="h", reward=1.0, metadata=second.metadata
    )
    book.record(done)
    [group] = book.take(1)
    assert group.rewards == [0.0, 1.0]
    assert rollout_failure(group.results[0]) == OUTCOMES[outcome][1]
    assert infrastructure_failures(group.results) == {}


def test_an_infrastructure_failure_is_still_retried_never_scored() -> None:
    book = GroupBook(
        1, run_id="r", filter_zero_variance=False, failure_policy=FailurePolicy.zero, max_retries=1
    )
    book.open_group({"handler": "h"}, 0)
    [spec] = book.next_submissions(1)
    book.record(failed(spec.job_id, "infra", spec.metadata))
    assert book.counters.retried == 1 and book.counters.infra_failed == 1
