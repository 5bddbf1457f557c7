"""The DAPO consumer driving a real HTTP farm (stand-in under uvicorn) with scripted rewards."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Iterator
from typing import Any

import pytest

from farm.client import (
    AsyncDapoConsumer,
    AsyncFarmClient,
    DapoConfig,
    DapoConsumer,
    FailurePolicy,
    FarmClient,
    FarmError,
)
from farm.client.polling import PollPolicy
from farm.models import JobState
from tests.client.conftest import standin_stats

FAST_POLL = PollPolicy(initial_s=0.005, maximum_s=0.05)


def prompts(**fields: Any) -> Iterator[dict[str, Any]]:
    for i in itertools.count():
        yield {"handler": "scripted", "duration_s": 0.03, "p": 0.5, "i": i, **fields}


def consumer(url: str, loader: Any, **config: Any) -> DapoConsumer:
    return DapoConsumer(url, loader, DapoConfig(**{"n": 4, "concurrency": 12, **config}), poll=FAST_POLL)


def first_fast(slow_s: float) -> Iterator[dict[str, Any]]:
    """Prompt 0 finishes at once with an informative group; the rest take `slow_s`."""
    for instance in prompts(rewards=[0.0, 1.0]):
        yield {**instance, "duration_s": 0.02 if instance["i"] == 0 else slow_s}


def assert_cancelled_or_never_sent(url: str, job_ids: list[str]) -> None:
    """Jobs still on their way to the API when dropped are never created there (404)."""
    with FarmClient(url) as farm:
        for job_id in job_ids:
            try:
                assert farm.get_job(job_id).state is JobState.cancelled
            except FarmError as exc:
                assert exc.status == 404


def test_returns_exactly_k_informative_groups(farm_url: str) -> None:
    with consumer(farm_url, prompts()) as dapo:
        batch = dapo.next_batch(5, timeout_s=20)
    assert len(batch.groups) == 5 == batch.stats.groups
    for group in batch.groups:
        assert len(group.results) == 4
        assert len(set(group.rewards)) == 2
        assert all(r.state is JobState.done for r in group.results)
        assert {r.metadata["group_id"] for r in group.results} == {group.group_id}
    assert batch.stats.submitted >= 20
    assert batch.stats.wall_time_s > 0


def test_keeps_the_farm_saturated_within_budget(farm_url: str) -> None:
    with consumer(farm_url, prompts(duration_s=0.1), concurrency=8) as dapo:
        dapo.next_batch(4, timeout_s=20)
    assert standin_stats(farm_url)["max_active"] == 8


def test_without_carry_over_the_rest_is_cancelled(farm_url: str) -> None:
    dapo = consumer(farm_url, first_fast(1.0), carry_over=False, concurrency=16)
    try:
        batch = dapo.next_batch(1, timeout_s=20)
        assert batch.stats.carried_jobs == 0 and batch.stats.carried_groups == 0
        assert batch.stats.cancelled > 0
        assert dapo.book.idle()
        with FarmClient(farm_url) as farm:
            states = farm.status()["jobs"]
        assert 0 < states.get("cancelled", 0) <= batch.stats.cancelled
        assert states.get("run", 0) == states.get("queued", 0) == 0
    finally:
        dapo.close()


def test_carry_over_feeds_the_next_call(farm_url: str) -> None:
    with consumer(farm_url, first_fast(0.3), concurrency=12) as dapo:
        first = dapo.next_batch(1, timeout_s=20)
        assert first.groups[0].prompt_index == 0
        assert first.stats.carried_jobs >= 8 and first.stats.cancelled == 0
        carried = set(dapo.book.in_flight)
        second = dapo.next_batch(1, timeout_s=20)
        used = {r.job_id for g in second.groups for r in g.results}
        assert used <= carried, "the second batch is built from jobs started during the first"
        assert second.stats.submitted < first.stats.submitted


def stale_then_fast() -> Iterator[dict[str, Any]]:
    """Prompt 0 finishes at once; the prompts the first call can open besides it (1-2 at the start, 3 when
    a slot of prompt 0 frees) run far past the test, so they are still running, never done, when the
    version moves on; every later prompt is fast. (With 0.3 s for all of them, a loaded host finished
    the carried jobs before they were counted or cancelled.)"""
    for instance in prompts(rewards=[0.0, 1.0]):
        yield {**instance, "duration_s": 60.0 if instance["i"] in (1, 2, 3) else 0.02}


def test_stale_carried_work_is_cancelled(farm_url: str) -> None:
    with consumer(farm_url, stale_then_fast(), concurrency=12, max_staleness=1) as dapo:
        dapo.next_batch(1, policy_version=0, timeout_s=20)
        stale = dapo.book.in_flight
        assert len(stale) >= 8
        batch = dapo.next_batch(1, policy_version=2, timeout_s=20)
        assert batch.stats.dropped_stale >= 2
        assert all(g.policy_version == 2 for g in batch.groups)
        assert_cancelled_or_never_sent(farm_url, stale)


def test_retry_policy_recovers_transient_failures(farm_url: str) -> None:
    with consumer(farm_url, prompts(fail_attempts=1), failure_policy=FailurePolicy.retry) as dapo:
        batch = dapo.next_batch(3, timeout_s=20)
    assert len(batch.groups) == 3
    assert batch.stats.retried >= 12
    assert all(r.job_id.endswith("-r1") for g in batch.groups for r in g.results)


def test_drop_policy_skips_groups_with_failures(farm_url: str) -> None:
    def loader() -> Iterator[dict[str, Any]]:
        for instance in prompts():
            yield {**instance, "fail_slots": [1] if instance["i"] % 2 else []}

    with consumer(farm_url, loader(), failure_policy=FailurePolicy.drop) as dapo:
        batch = dapo.next_batch(3, timeout_s=20)
    assert batch.stats.dropped_failed > 0
    assert all(g.instance["fail_slots"] == [] for g in batch.groups)


def test_zero_policy_scores_failures_as_zero(farm_url: str) -> None:
    loader = prompts(fail_slots=[0], rewards=[9.0, 1.0, 1.0, 1.0])
    with consumer(farm_url, loader, failure_policy=FailurePolicy.zero) as dapo:
        batch = dapo.next_batch(2, timeout_s=20)
    for group in batch.groups:
        assert group.rewards == [0.0, 1.0, 1.0, 1.0]
        assert group.results[0].state is JobState.failed


def test_refused_instances_do_not_stop_the_run(farm_url: str) -> None:
    def loader() -> Iterator[dict[str, Any]]:
        for instance in prompts():
            yield {**instance, "handler": "unknown"} if instance["i"] == 0 else instance

    with consumer(farm_url, loader(), failure_policy=FailurePolicy.drop) as dapo:
        batch = dapo.next_batch(2, timeout_s=20)
    assert batch.stats.dropped_failed == 1
    assert all(g.instance["i"] != 0 for g in batch.groups)


def test_grpo_mode_returns_every_complete_group(farm_url: str) -> None:
    loader = prompts(rewards=[1.0])  # every group zero-variance
    with consumer(farm_url, loader, filter_zero_variance=False, n=2) as dapo:
        batch = dapo.next_batch(4, timeout_s=20)
    assert len(batch.groups) == 4
    assert all(g.rewards == [1.0, 1.0] for g in batch.groups)


def test_exhausted_dataloader_returns_what_there_is(farm_url: str) -> None:
    loader = [list(itertools.islice(prompts(), 3))]  # one "batch" of three instances, flattened
    with consumer(farm_url, loader, filter_zero_variance=False) as dapo:
        batch = dapo.next_batch(10, timeout_s=20)
    assert len(batch.groups) == 3
    assert batch.stats.exhausted


def test_checkpoint_swap_replaces_backends(farm_url: str) -> None:
    with consumer(farm_url, prompts()) as dapo:
        dapo.swap_checkpoint(1, ["http://127.0.0.1:9/v1", "http://127.0.0.1:10/v1"])
        assert dapo.book.policy_version == 1
    with FarmClient(farm_url) as farm:
        assert [b.address for b in farm.llm_servers()] == ["http://127.0.0.1:9/v1", "http://127.0.0.1:10/v1"]


def test_async_consumer_and_timeout(farm_url: str) -> None:
    async def scenario() -> None:
        async with AsyncFarmClient(farm_url, poll=FAST_POLL) as client:
            dapo = AsyncDapoConsumer(client, prompts(), DapoConfig(n=2, concurrency=6))
            batch = await dapo.next_batch(2, timeout_s=20)
            assert len(batch.groups) == 2
            slow = AsyncDapoConsumer(client, prompts(duration_s=10), DapoConfig(n=2, concurrency=2))
            from farm.client import FarmTimeout

            with pytest.raises(FarmTimeout):
                await slow.next_batch(1, timeout_s=0.3)
            await slow.close()
            await dapo.close()

    asyncio.run(scenario())
