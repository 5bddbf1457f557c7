"""The DAPO consumer and the adapters against a whole real farm (API, Celery workers, Redis, scripted LLM)."""

from __future__ import annotations

import itertools
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from farm.adapters import to_verl
from farm.client import DapoConfig, DapoConsumer, FailurePolicy, FarmClient
from farm.client.polling import PollPolicy
from farm.launcher import LocalFarm, WorkerSpec
from farm.models import JobState
from tests.farms import temp_farm
from tests.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # the CI slow step

PROBLEMS = Path(__file__).resolve().parents[2] / "handlers" / "math" / "problems.jsonl"
UNSOLVABLE = {"handler": "math", "question": "Name the largest known prime.", "answer": "none"}
POLL = PollPolicy(initial_s=0.01, maximum_s=0.1)


@pytest.fixture(scope="module")
def farm() -> Iterator[LocalFarm]:
    local = temp_farm(  # its own Redis: other suites' farms share the session's
        "farm-client-test-",
        workers=[WorkerSpec("init,eval", concurrency=4), WorkerSpec("run", concurrency=8)],
        llm_args=["--accuracy", "0.5", "--seed", "3"],
    )
    with local.start(timeout_s=90):
        with FarmClient(local.api_url) as client:  # warm every worker up once (tokenizer load)
            ids = [client.submit(problem) for problem in itertools.islice(math_problems(), 8)]
            list(client.as_completed(ids, timeout_s=60))
        yield local


def math_problems() -> Iterator[dict[str, Any]]:
    """Scripted problems interleaved with one the policy can never solve (a zero-variance group)."""
    rows = [json.loads(line) for line in PROBLEMS.read_text().splitlines() if line.strip()]
    for i, row in enumerate(itertools.cycle(rows)):
        yield {"handler": "math", "question": row["question"], "answer": row["answer"]}
        if i % 3 == 0:
            yield UNSOLVABLE


def config(**fields: Any) -> DapoConfig:
    base = {"n": 4, "concurrency": 8, "seed": 11, "sampling_params": {"max_tokens": 256}}
    return DapoConfig(**{**base, **fields})


def test_informative_groups_carry_over_and_convert(farm: LocalFarm) -> None:
    with DapoConsumer(farm.api_url, math_problems(), config(), poll=POLL) as dapo:
        first = dapo.next_batch(3, policy_version=0, timeout_s=60)
        second = dapo.next_batch(3, policy_version=1, timeout_s=60)
    for batch in (first, second):
        assert len(batch.groups) == 3
        for group in batch.groups:
            assert group.instance["question"] != UNSOLVABLE["question"]
            assert min(group.rewards) == 0.0 and max(group.rewards) == 1.0
            assert all(r.state is JobState.done and r.trajectory.traces for r in group.results)
            assert {r.metadata["group_id"] for r in group.results} == {group.group_id}
    assert first.stats.dropped_zero_variance + second.stats.dropped_zero_variance >= 1
    assert first.stats.carried_jobs > 0
    assert second.stats.submitted < first.stats.submitted + first.stats.carried_jobs

    verl = to_verl(first.groups, pad_token_id=0)
    assert verl["input_ids"].shape[0] == sum(
        len(r.trajectory.traces) for g in first.groups for r in g.results
    )
    assert verl["response_mask"].sum() > 0


def test_no_carry_over_cancels_the_rest_and_failures_are_tolerated(farm: LocalFarm) -> None:
    def loader() -> Iterator[dict[str, Any]]:
        for i, problem in enumerate(math_problems()):
            yield {"handler": "math", "question": "missing answer"} if i == 1 else problem

    cfg = config(carry_over=False, concurrency=8, failure_policy=FailurePolicy.drop)
    dapo = DapoConsumer(farm.api_url, loader(), cfg, poll=POLL)
    try:
        batch = dapo.next_batch(2, timeout_s=60)
        abandoned = dapo.book.counters.cancelled
        assert len(batch.groups) == 2
        assert batch.stats.dropped_failed == 1  # the instance the API refused (422)
        assert batch.stats.carried_jobs == 0 and dapo.book.idle()
    finally:
        dapo.close()
    # every job this consumer started is terminal soon after, and the farm runs nothing for it
    with FarmClient(farm.api_url) as client:
        wait_until(
            lambda: client.status().get("active_jobs", 0),
            20,
            accept=lambda n: n == 0,
            interval_s=0.05,
            what="no active job",
        )
        if abandoned:
            states = client.status()["jobs"]
            assert states.get("cancelled", 0) >= 1
