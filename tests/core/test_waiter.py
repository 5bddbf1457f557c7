"""The API's wait for a job's end (farm/api/waiter.py) against a real Redis: a watch opened before the
job is created hears its end even when the end is published before the creating coroutine runs again,
which is what a no-op rollout does under load (the end used to be missed, and /process slept a whole
RECHECK_S)."""

from __future__ import annotations

import asyncio
import time

import redis.asyncio as aioredis

from farm import keys
from farm.api.waiter import RECHECK_S, JobWaiter
from farm.jobs.messages import QueuedMessage
from farm.jobs.spec import JobSpec
from farm.jobs.store import AsyncJobStore, terminal_result
from farm.models.results import JobState
from tests.waiting import wait_until_async


async def _end_before_the_wait(redis_url: str, job_id: str) -> tuple[JobState | None, float, bool]:
    client = aioredis.Redis.from_url(redis_url, decode_responses=True)
    store = AsyncJobStore(client, ttl_s=60)
    waiter = JobWaiter(client, store)
    await waiter.start()
    try:
        await wait_until_async(
            lambda: client.pubsub_numsub(keys.DONE_CHANNEL), 5, what="the waiter's subscription",
            accept=lambda counts: counts[0][1] >= 1,
        )  # fmt: skip
        with waiter.watch(job_id) as watch:
            spec = JobSpec(job_id=job_id, handler="noop", instance={}, timeout_s=60)
            created = await store.create(spec, {"init": "t"}, QueuedMessage("q:init", job_id))
            record = await store.get(job_id)
            assert record is not None
            assert await store.finalize(terminal_result(record, JobState.cancelled), only_from="queued")
            # The end is heard before the creator asks for it.
            await wait_until_async(watch.event.is_set, 5, what="the watch to hear the job's end")
            t0 = time.perf_counter()
            peek = await watch.result(30, just_created=created)
            elapsed = time.perf_counter() - t0
        return (peek.state if peek else None), elapsed, job_id in waiter._events
    finally:
        await waiter.stop()
        await client.aclose()


def test_an_end_published_before_the_wait_is_not_missed(redis_url: str) -> None:
    state, elapsed, still_registered = asyncio.run(_end_before_the_wait(redis_url, "waited-1"))
    assert state is JobState.cancelled
    assert elapsed < RECHECK_S / 2, f"the end was missed: the re-check found it after {elapsed:.2f}s"
    assert not still_registered  # the watch's event is gone once it closes
