"""A stage whose lease its worker could not renew in time stops by the worker's own clock, before the
lease can have expired in Redis (tasks/monitor.py); one renewed in time runs on."""

from __future__ import annotations

import time

import redis

from farm.jobs.store import LEASE_TTL_S, JobStore
from tasks.monitor import FENCE_MARGIN_S, JobMonitor


def test_an_unrenewed_lease_stops_the_stage_before_it_can_expire(redis_client: redis.Redis) -> None:
    monitor = JobMonitor(JobStore(redis_client, 60))
    now = time.monotonic()
    monitor.enter("fresh", 1, None, granted_at=now)
    monitor.enter("stale", 1, None, granted_at=now - (LEASE_TTL_S - FENCE_MARGIN_S) - 0.01)
    assert monitor.interruption("fresh") is None
    assert monitor.interruption("stale") == "lost"
    assert monitor.interruption("stale") == "lost"  # it stays lost
    monitor.leave("stale", 1)
    monitor.enter("stale", 2, None)  # a new attempt of the job starts with a full lease
    assert monitor.interruption("stale") is None
    for job_id, token in (("fresh", 1), ("stale", 2)):  # the monitor thread then idles: no Redis call after
        monitor.leave(job_id, token)


def test_a_superseded_attempt_leaving_keeps_the_new_attempts_lease_renewed(redis_client: redis.Redis) -> None:
    """The reaper gave a stalled stage's job to a new attempt that landed on the same worker process
    while the old attempt still ran: the old attempt's end must not stop the renewal of the new one
    (before: the old attempt's leave dropped the job's lease from the monitor, the new attempt's lease
    expired, and the reaper sent the job again, until the job failed as WorkerLost: met in the real-vLLM
    run under load). The old attempt runs on and is discarded when it ends (its writes are fenced)."""
    store = JobStore(redis_client, 60)
    job_key = store.layout.job("superseded")
    redis_client.hset(job_key, mapping={"lease_token": "2", "lease_expires": "0"})
    monitor = JobMonitor(store)
    monitor.enter("superseded", 1, None)
    monitor.enter("superseded", 2, None)
    assert monitor.interruption("superseded") is None
    monitor.leave("superseded", 1)
    before = time.time()
    time.sleep(LEASE_TTL_S / 3 + 1)
    assert float(redis_client.hget(job_key, "lease_expires") or 0) > before + LEASE_TTL_S - 1
    assert monitor.interruption("superseded") is None
    monitor.leave("superseded", 2)
    redis_client.delete(job_key)
