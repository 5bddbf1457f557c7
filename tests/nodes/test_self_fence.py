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
    monitor.leave("stale")
    monitor.enter("stale", 2, None)  # a new attempt of the job starts with a full lease
    assert monitor.interruption("stale") is None
    for job_id in ("fresh", "stale"):  # the monitor thread then idles: no Redis call after the test
        monitor.leave(job_id)
