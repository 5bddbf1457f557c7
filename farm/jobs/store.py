"""Reading and writing job records. Workers use `JobStore` (sync), the API `AsyncJobStore`.

Both take the Redis that holds the jobs (a plain Redis or a cluster) and, when the Celery broker is
another Redis (FARM_BROKER_URL), a client of the broker. Each method is an operation of
farm/jobs/ops.py, written once for both (what it sends, how it reads the replies), run by the store's
sync or asyncio runner (farm/redis_ops.py).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Generic

import redis
import redis.asyncio as aioredis

from farm import keys
from farm.jobs.callback_records import AsyncCallbackStore
from farm.jobs.index import AsyncJobIndex
from farm.jobs.ops import LEASE_TTL_S, READY_SETTLE_S, REVOKED_KEEP_S, JobOps, Reaped
from farm.jobs.record import JobPeek, JobRecord, ResultSource, StageHandoff, terminal_result
from farm.keys import JobKeys, Layout
from farm.redis_ops import AsyncRunner, Client, OpMethod, Runner, RunnerT

__all__ = [
    "LEASE_TTL_S",
    "READY_SETTLE_S",
    "REVOKED_KEEP_S",
    "AsyncJobStore",
    "JobPeek",
    "JobRecord",
    "JobStore",
    "Reaped",
    "ResultSource",
    "StageHandoff",
    "terminal_result",
]


def _is_cluster(client: object) -> bool:
    return isinstance(client, redis.RedisCluster | aioredis.RedisCluster)


def _layout_for(client: object) -> Layout:
    """A cluster client spreads jobs over the cluster's buckets whatever this process's settings say."""
    return Layout(keys.CLUSTER_BUCKETS) if _is_cluster(client) else keys.layout()


class _Jobs(Generic[Client, RunnerT]):
    """The job operations, which the sync and the async store both run."""

    runner_type: Callable[[Client, Client | None], RunnerT]

    def __init__(
        self, client: Client, ttl_s: int, layout: Layout | None = None, broker: Client | None = None
    ) -> None:
        self._r: Client = client
        """The raw client: private; every command goes through an operation."""
        self.ttl_s = ttl_s
        self.layout = layout or _layout_for(client)
        self.broker: Client | None = broker
        """None: the broker is this Redis, and scripts push stage messages themselves."""
        self.ops = JobOps(self.layout, ttl_s, separate_broker=broker is not None, cluster=_is_cluster(client))
        self.runner: RunnerT = self.runner_type(client, broker)

    def keys(self, job_id: str) -> JobKeys:
        return self.layout.job_keys(job_id)

    def buckets(self) -> list[str]:
        """The hash-tag buckets jobs are spread over (one on a plain Redis)."""
        return self.layout.tags()

    create = OpMethod(JobOps.create)
    enqueue = OpMethod(JobOps.enqueue)
    get = OpMethod(JobOps.get)
    begin_stage = OpMethod(JobOps.begin_stage)
    renew = OpMethod(JobOps.renew)
    end_stage = OpMethod(JobOps.end_stage)
    release = OpMethod(JobOps.release)
    reap = OpMethod(JobOps.reap)
    finalize = OpMethod(JobOps.finalize)
    take_ready_slot = OpMethod(JobOps.take_ready_slot)
    drop_ready_slot = OpMethod(JobOps.drop_ready_slot)
    forget_init = OpMethod(JobOps.forget_init)
    add_queued_time = OpMethod(JobOps.add_queued_time)
    is_revoked = OpMethod(JobOps.is_revoked)
    revoked_among = OpMethod(JobOps.revoked_among)
    active_ids = OpMethod(JobOps.active_ids)
    revoke = OpMethod(JobOps.revoke)
    counts_by_state = OpMethod(JobOps.counts_by_state)
    queue_depths = OpMethod(JobOps.queue_depths)
    ready_by_node = OpMethod(JobOps.ready_by_node)
    count_infra_retry = OpMethod(JobOps.count_infra_retry)
    mark_pinned = OpMethod(JobOps.mark_pinned)
    prune_index = OpMethod(JobOps.prune_index)
    sandbox_claims = OpMethod(JobOps.sandbox_claims)
    queued_since = OpMethod(JobOps.queued_since)
    queued_messages = OpMethod(JobOps.queued_messages)
    take_lock = OpMethod(JobOps.take_lock)
    is_draining = OpMethod(JobOps.is_draining)
    mark_draining = OpMethod(JobOps.mark_draining)
    clear_draining = OpMethod(JobOps.clear_draining)
    peek = OpMethod(JobOps.peek)
    get_many = OpMethod(JobOps.get_many)
    active_count = OpMethod(JobOps.active_count)
    stats = OpMethod(JobOps.stats)
    exists = OpMethod(JobOps.exists)
    specs = OpMethod(JobOps.specs)
    progress = OpMethod(JobOps.progress)
    accepting = OpMethod(JobOps.accepting)
    set_accepting = OpMethod(JobOps.set_accepting)


class JobStore(_Jobs[redis.Redis, Runner]):
    runner_type = Runner


class AsyncJobStore(_Jobs[aioredis.Redis, AsyncRunner]):
    runner_type = AsyncRunner

    def __init__(
        self,
        client: aioredis.Redis,
        ttl_s: int,
        layout: Layout | None = None,
        broker: aioredis.Redis | None = None,
    ) -> None:
        super().__init__(client, ttl_s, layout, broker)
        self.callbacks = AsyncCallbackStore(client, self.layout)
        """The callback deliveries of these jobs (farm/jobs/callback_records.py)."""
        self.index = AsyncJobIndex(client, self.layout)
        """The viewer's reads: jobs by creation time and their rows (farm/jobs/index.py)."""
