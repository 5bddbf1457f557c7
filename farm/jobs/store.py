"""Reading and writing job records. Workers use `JobStore` (sync), the API `AsyncJobStore`.

Both take the Redis that holds the jobs (a plain Redis or a cluster) and, when the Celery broker is
another Redis (FARM_BROKER_URL), a client of the broker. Each method is an operation of
farm/jobs/ops.py, written once for both (what it sends, how it reads the replies), run by the store's
sync or asyncio runner (farm/redis_ops.py).
"""

from __future__ import annotations

import redis
import redis.asyncio as aioredis

from farm import keys
from farm.jobs.callback_records import AsyncCallbackStore
from farm.jobs.index import AsyncJobIndex
from farm.jobs.ops import LEASE_TTL_S, READY_SETTLE_S, REVOKED_KEEP_S, JobOps, Reaped
from farm.jobs.record import JobPeek, JobRecord, ResultSource, StageHandoff, terminal_result
from farm.keys import JobKeys, Layout
from farm.redis_ops import AsyncOp, AsyncRunner, Runner, SyncOp

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


class JobStore:
    def __init__(
        self,
        client: redis.Redis,
        ttl_s: int,
        layout: Layout | None = None,
        broker: redis.Redis | None = None,
    ) -> None:
        self._r = client
        """The raw client: private; every command goes through an operation."""
        self.ttl_s = ttl_s
        self.layout = layout or _layout_for(client)
        self.broker = broker
        """None: the broker is this Redis, and scripts push stage messages themselves."""
        self.ops = JobOps(self.layout, ttl_s, separate_broker=broker is not None, cluster=_is_cluster(client))
        self.runner = Runner(client, broker)

    def keys(self, job_id: str) -> JobKeys:
        return self.layout.job_keys(job_id)

    create = SyncOp(JobOps.create)
    enqueue = SyncOp(JobOps.enqueue)
    get = SyncOp(JobOps.get)
    begin_stage = SyncOp(JobOps.begin_stage)
    renew = SyncOp(JobOps.renew)
    end_stage = SyncOp(JobOps.end_stage)
    release = SyncOp(JobOps.release)
    reap = SyncOp(JobOps.reap)
    finalize = SyncOp(JobOps.finalize)
    take_ready_slot = SyncOp(JobOps.take_ready_slot)
    drop_ready_slot = SyncOp(JobOps.drop_ready_slot)
    forget_init = SyncOp(JobOps.forget_init)
    add_queued_time = SyncOp(JobOps.add_queued_time)
    is_revoked = SyncOp(JobOps.is_revoked)
    revoked_among = SyncOp(JobOps.revoked_among)
    active_ids = SyncOp(JobOps.active_ids)
    revoke = SyncOp(JobOps.revoke)
    counts_by_state = SyncOp(JobOps.counts_by_state)
    queue_depths = SyncOp(JobOps.queue_depths)
    ready_by_node = SyncOp(JobOps.ready_by_node)
    count_infra_retry = SyncOp(JobOps.count_infra_retry)
    mark_pinned = SyncOp(JobOps.mark_pinned)
    prune_index = SyncOp(JobOps.prune_index)
    sandbox_claims = SyncOp(JobOps.sandbox_claims)
    queued_since = SyncOp(JobOps.queued_since)
    queued_messages = SyncOp(JobOps.queued_messages)
    take_lock = SyncOp(JobOps.take_lock)
    is_draining = SyncOp(JobOps.is_draining)
    mark_draining = SyncOp(JobOps.mark_draining)
    clear_draining = SyncOp(JobOps.clear_draining)

    def buckets(self) -> list[str]:
        """The hash-tag buckets jobs are spread over (one on a plain Redis)."""
        return self.layout.tags()


class AsyncJobStore:
    def __init__(
        self,
        client: aioredis.Redis,
        ttl_s: int,
        layout: Layout | None = None,
        broker: aioredis.Redis | None = None,
    ) -> None:
        self._r = client
        """The raw client: private; every command goes through an operation."""
        self.ttl_s = ttl_s
        self.layout = layout or _layout_for(client)
        self.broker = broker
        self.ops = JobOps(self.layout, ttl_s, separate_broker=broker is not None, cluster=_is_cluster(client))
        self.runner = AsyncRunner(client, broker)
        self.callbacks = AsyncCallbackStore(client, self.layout)
        """The callback deliveries of these jobs (farm/jobs/callback_records.py)."""
        self.index = AsyncJobIndex(client, self.layout)
        """The viewer's reads: jobs by creation time and their rows (farm/jobs/index.py)."""

    def keys(self, job_id: str) -> JobKeys:
        return self.layout.job_keys(job_id)

    create = AsyncOp(JobOps.create)
    get = AsyncOp(JobOps.get)
    peek = AsyncOp(JobOps.peek)
    get_many = AsyncOp(JobOps.get_many)
    finalize = AsyncOp(JobOps.finalize)
    revoke = AsyncOp(JobOps.revoke)
    active_ids = AsyncOp(JobOps.active_ids)
    active_count = AsyncOp(JobOps.active_count)
    counts_by_state = AsyncOp(JobOps.counts_by_state)
    stats = AsyncOp(JobOps.stats)
    queue_depths = AsyncOp(JobOps.queue_depths)
    ready_by_node = AsyncOp(JobOps.ready_by_node)
    exists = AsyncOp(JobOps.exists)
    specs = AsyncOp(JobOps.specs)
    progress = AsyncOp(JobOps.progress)
    accepting = AsyncOp(JobOps.accepting)
    set_accepting = AsyncOp(JobOps.set_accepting)
