"""A stale stage attempt never tears down the sandbox its retry needs: teardown is fenced by the lease
token like every other end-of-stage write (real Redis, the real lease scripts, the real stage code)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any, ClassVar

import pytest
import redis

from farm import keys
from farm.handler.context import JobContext
from farm.handler.protocol import AgentHandler, EvalOutput, RunOutput
from farm.jobs.dispatch import stage_task_ids
from farm.jobs.messages import QueuedMessage
from farm.jobs.spec import JobSpec
from farm.jobs.store import JobStore
from farm.models.results import JobState
from tasks import lifecycle


class RecordingHandler(AgentHandler):
    name = "recording"
    node_local = False
    torn_down: ClassVar[list[str]] = []

    def init(self, ctx: JobContext) -> dict[str, Any]:
        return {"sandbox": "s"}

    def run(self, ctx: JobContext, state: dict[str, Any]) -> RunOutput:
        raise RuntimeError("the agent crashed")

    def eval(self, ctx: JobContext, state: dict[str, Any], run: RunOutput) -> EvalOutput:
        return EvalOutput(reward=1.0)

    def teardown(self, ctx: JobContext, state: dict[str, Any]) -> None:
        self.torn_down.append(state["sandbox"])


@pytest.fixture
def store(redis_url: str) -> Iterator[JobStore]:
    client = redis.Redis.from_url(redis_url)
    yield JobStore(client, 3600)
    client.close()


def _job(store: JobStore, job_id: str) -> None:
    spec = JobSpec(job_id=job_id, handler="recording", instance={"handler": "recording"}, timeout_s=60)
    assert store.create(spec, stage_task_ids(job_id), QueuedMessage(key="test:init", payload="{}"))
    store._r.hset(keys.job(job_id), "init_state", '{"sandbox": "s"}')  # what init recorded


def _take_run(store: JobStore, job_id: str, owner: str) -> lifecycle.Attempt:
    verdict, record, token = store.begin_stage(job_id, "run", owner)
    assert verdict == "go" and record is not None
    return lifecycle.Attempt(store, record, "run", token)


def _reap(store: JobStore, job_id: str) -> None:
    """What the reaper does to a lease whose worker stopped renewing it (a long GC pause, a partition)."""
    store._r.hset(keys.job(job_id), "lease_expires", "0")
    store._r.zadd(keys.leases(keys.layout().tag(job_id)), {job_id: 0})
    assert [r.job_id for r in store.reap()] == [job_id]


def test_only_the_lease_holder_may_tear_down(store: JobStore) -> None:
    _job(store, "fence-1")
    stale = _take_run(store, "fence-1", "worker-a")
    assert stale.holds_lease()
    _reap(store, "fence-1")
    retry = _take_run(store, "fence-1", "worker-b")
    assert retry.token > stale.token
    assert not stale.holds_lease() and retry.holds_lease()


def test_a_stale_run_that_fails_leaves_the_retry_its_sandbox(store: JobStore) -> None:
    _job(store, "fence-2")
    stale = _take_run(store, "fence-2", "worker-a")
    handler = RecordingHandler()
    RecordingHandler.torn_down.clear()
    ctx = lifecycle._context(stale.record, handler, "run", lambda: None, stale)
    _reap(store, "fence-2")
    retry = _take_run(store, "fence-2", "worker-b")

    lifecycle._run_stage(stale, handler, ctx)  # the agent crashes in the stale attempt after the reap
    assert RecordingHandler.torn_down == []  # the retry's sandbox is still there
    record = store.get("fence-2")
    assert record is not None and not record.state.terminal  # and the stale attempt ended nothing

    lifecycle._run_stage(
        retry, handler, lifecycle._context(retry.record, handler, "run", lambda: None, retry)
    )
    assert RecordingHandler.torn_down == ["s"]
    record = store.get("fence-2")
    assert record is not None and record.state is JobState.failed


def test_holding_the_lease_renews_it(store: JobStore) -> None:
    _job(store, "fence-3")
    attempt = _take_run(store, "fence-3", "worker-a")
    store._r.hset(keys.job("fence-3"), "lease_expires", str(time.time() + 1))
    assert attempt.holds_lease()
    assert float(store._r.hget(keys.job("fence-3"), "lease_expires")) > time.time() + 5
