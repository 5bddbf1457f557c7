"""Reading and writing job records. Workers use `JobStore` (sync), the API `AsyncJobStore`.

Both take the Redis that holds the jobs (a plain Redis or a cluster) and, when the Celery broker is
another Redis (FARM_BROKER_URL), a client of the broker. Each method runs one operation of
farm/jobs/ops.py, where what it sends and how it reads the replies is written once for both.
"""

from __future__ import annotations

import json
from typing import Any

import redis
import redis.asyncio as aioredis

from farm import keys
from farm.jobs.messages import QueuedMessage
from farm.jobs.ops import LEASE_TTL_S, READY_SETTLE_S, REVOKED_KEEP_S, JobOps, Reaped
from farm.jobs.record import JobPeek, JobRecord, ResultSource, terminal_result
from farm.jobs.spec import JobSpec
from farm.keys import JobKeys, Layout
from farm.models.results import JobResult
from farm.redis_ops import AsyncRunner, Runner

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
    "terminal_result",
]


def _layout_for(client: object) -> Layout:
    """A cluster client spreads jobs over the cluster's buckets whatever this process's settings say."""
    if isinstance(client, redis.RedisCluster | aioredis.RedisCluster):
        return Layout(keys.CLUSTER_BUCKETS)
    return keys.layout()


class JobStore:
    def __init__(
        self,
        client: redis.Redis,
        ttl_s: int,
        layout: Layout | None = None,
        broker: redis.Redis | None = None,
    ) -> None:
        self.r = client
        self.ttl_s = ttl_s
        self.layout = layout or _layout_for(client)
        self.broker = broker
        """None: the broker is this Redis, and scripts push stage messages themselves."""
        self.ops = JobOps(self.layout, ttl_s, separate_broker=broker is not None)
        self._run = Runner(client, broker)

    def keys(self, job_id: str) -> JobKeys:
        return self.layout.job_keys(job_id)

    def create(self, spec: JobSpec, task_ids: dict[str, str], init: QueuedMessage) -> bool:
        """Records the job and enqueues its init message; False (and nothing queued) when a job with this
        id exists already (idempotent resubmission)."""
        return self._run(self.ops.create(spec, task_ids, init))

    def enqueue(self, message: QueuedMessage) -> None:
        """Sends a stage message on its own (a stage sent again after its attempt was lost)."""
        self._run(self.ops.enqueue(message))

    def get(self, job_id: str) -> JobRecord | None:
        return self._run(self.ops.get(job_id))

    def begin_stage(self, job_id: str, stage: str, owner: str) -> tuple[str, JobRecord | None, int]:
        """Checks, leases and enters `stage` in one round trip; see scripts.BEGIN_STAGE."""
        return self._run(self.ops.begin_stage(job_id, stage, owner))

    def renew(self, leases: dict[str, int]) -> set[str]:
        """Renews every (job id -> token) lease; returns the job ids whose lease is lost."""
        return self._run(self.ops.renew(leases))

    def end_stage(
        self,
        job_id: str,
        token: int,
        stage: str,
        elapsed_s: float,
        following: QueuedMessage,
        fields: dict[str, str] | None = None,
        **outputs: Any,
    ) -> bool:
        """Records the stage's time and JSON outputs (plus plain `fields`), marks it done, gives the
        lease back and enqueues the `following` stage, in one step. False if this attempt no longer
        holds the lease (nothing is written or sent)."""
        pairs = {name: json.dumps(value) for name, value in outputs.items()} | (fields or {})
        return self._run(self.ops.end_stage(job_id, token, stage, elapsed_s, following, pairs))

    def release(self, job_id: str, token: int, restart_from_init: bool) -> int:
        """Gives the lease back unfinished so the stage can be sent again; the infra retry count or 0."""
        return self._run(self.ops.release(job_id, token, restart_from_init))

    def reap(self, limit: int = 100, tags: list[str] | None = None) -> list[Reaped]:
        """Takes every expired lease (of the buckets `tags`, default all) from its presumed-dead holder;
        see scripts.REAP."""
        return self._run(self.ops.reap(limit, tags))

    def finalize(self, result: JobResult, only_from: str = "", token: int | None = None) -> bool:
        """Records the terminal result once; False if the job had already ended (or, with a token,
        if this attempt no longer holds the lease)."""
        return self._run(self.ops.finalize(result, only_from, token))

    def take_ready_slot(self, job_id: str, node: str, limit: int) -> bool:
        """Whether the job holds one of the node's READY slots (taking a free one); see TAKE_READY_SLOT.
        When the node looks full, members whose job no longer holds the slot are cleared (at most every
        READY_SETTLE_S per node and process: a waiting init polls this)."""
        return self._run(self.ops.take_ready_slot(job_id, node, limit))

    def drop_ready_slot(self, job_id: str) -> None:
        """Gives a job's READY slot back (what init made was discarded)."""
        self._run(self.ops.drop_ready_slot(job_id))

    def forget_init(self, job_id: str) -> None:
        """Discards what init recorded (its sandbox is on a node no run worker serves): the job starts
        over from init."""
        self._run(self.ops.forget_init(job_id))

    def add_queued_time(self, job_id: str, seconds: float) -> None:
        """Time a started stage spent waiting (for a READY slot) counts as queued, not in-stage."""
        self._run(self.ops.add_queued_time(job_id, seconds))

    def is_revoked(self, job_id: str) -> bool:
        return self._run(self.ops.is_revoked(job_id))

    def revoked_among(self, job_ids: list[str]) -> set[str]:
        return self._run(self.ops.revoked_among(job_ids))

    def active_ids(self) -> list[str]:
        return self._run(self.ops.active_ids())

    def revoke(self, job_id: str) -> None:
        """Asks for the job's cancellation (see AsyncJobStore.revoke)."""
        self._run(self.ops.revoke(job_id))

    def counts_by_state(self) -> dict[str, int]:
        """Jobs in each state now (terminal states: every job that ever ended, within the stats' life)."""
        return self._run(self.ops.counts_by_state())

    def count_infra_retry(self, job_id: str) -> int:
        """Counts a stage sent again outside a script (the stall sweep); the job's retry count."""
        return self._run(self.ops.count_infra_retry(job_id))

    def prune_index(self) -> None:
        """Drops the viewer's index entries past the result TTL."""
        self._run(self.ops.prune_index())


class AsyncJobStore:
    def __init__(
        self,
        client: aioredis.Redis,
        ttl_s: int,
        layout: Layout | None = None,
        broker: aioredis.Redis | None = None,
    ) -> None:
        self.r = client
        self.ttl_s = ttl_s
        self.layout = layout or _layout_for(client)
        self.broker = broker
        self.ops = JobOps(self.layout, ttl_s, separate_broker=broker is not None)
        self._run = AsyncRunner(client, broker)

    def keys(self, job_id: str) -> JobKeys:
        return self.layout.job_keys(job_id)

    async def create(self, spec: JobSpec, task_ids: dict[str, str], init: QueuedMessage) -> bool:
        return await self._run(self.ops.create(spec, task_ids, init))

    async def get(self, job_id: str) -> JobRecord | None:
        return await self._run(self.ops.get(job_id))

    async def peek(self, job_id: str) -> JobPeek | None:
        return await self._run(self.ops.peek(job_id))

    async def get_many(self, job_ids: list[str]) -> list[JobRecord | None]:
        return await self._run(self.ops.get_many(job_ids))

    async def finalize(self, result: JobResult, only_from: str = "") -> bool:
        """Like JobStore.finalize; `only_from="queued"` ends a job only if no stage has started (so
        it never holds a READY slot)."""
        return await self._run(self.ops.finalize(result, only_from, None))

    async def revoke(self, job_id: str) -> None:
        """Asks for the job's cancellation: a stage that starts finds it in the job's hash, a running
        one at its monitor's next poll of the revoked set (scripts.REVOKE)."""
        await self._run(self.ops.revoke(job_id))

    async def active_ids(self) -> list[str]:
        return await self._run(self.ops.active_ids())

    async def active_count(self) -> int:
        return await self._run(self.ops.active_count())

    async def counts_by_state(self) -> dict[str, int]:
        return await self._run(self.ops.counts_by_state())

    async def stats(self) -> dict[str, float]:
        """The farm's counters: every bucket's job statistics, those derived from the state changes,
        and the farm-wide ones (gateway)."""
        return await self._run(self.ops.stats())
