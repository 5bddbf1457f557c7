"""Reading and writing job records. Workers use `JobStore` (sync), the API `AsyncJobStore`.

Both take the Redis that holds the jobs (a plain Redis or a cluster) and, when the Celery broker is
another Redis (FARM_BROKER_URL), a client of the broker: then a stage message is pushed right after
the script that records its stage instead of inside it, and the stall sweep (tasks/reaper.py) re-sends
a message lost between the two.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, cast

import redis
import redis.asyncio as aioredis

from farm import keys
from farm.jobs import scripts
from farm.jobs.messages import QueuedMessage
from farm.jobs.record import JobPeek, JobRecord, ResultSource, terminal_result
from farm.jobs.spec import JobSpec
from farm.keys import JobField, JobKeys, Layout
from farm.models.results import STAGES, JobResult, JobState
from farm.text import as_text as _s

__all__ = [
    "LEASE_TTL_S",
    "AsyncJobStore",
    "JobPeek",
    "JobRecord",
    "JobStore",
    "Reaped",
    "ResultSource",
    "terminal_result",
]

REVOKED_KEEP_S = 24 * 3600
READY_SETTLE_S = 5.0
"""A READY member this young is never taken for stale: its job may not have recorded `ready_node` yet."""
ScriptArg = str | int | float
"""What a Lua script accepts in ARGV."""

_STATES = {state.value for state in JobState}
LEASE_TTL_S = 6.0
"""A running stage renews its lease every LEASE_TTL_S / 3; a lease this old means the worker is gone."""


def _create_args(spec: JobSpec, task_ids: dict[str, str], ttl_s: int, init: QueuedMessage) -> list[Any]:
    return [
        spec.job_id,
        spec.model_dump_json(),
        json.dumps(task_ids),
        time.time(),
        ttl_s,
        spec.timeout_s,
        spec.callback_url or "",
        init.payload,
    ]


def _finalize_keys(k: JobKeys) -> list[str]:
    return [k.job, k.active, k.by_state, k.stats, k.leases, k.callbacks]


def _finalize_args(result: JobResult, ttl_s: int, only_from: str, token: int | None) -> list[Any]:
    result.metadata.setdefault(JobField.FINISHED_AT, time.time())
    token_arg = "" if token is None else str(token)
    return [
        result.job_id,
        result.state.value,
        result.model_dump_json(),
        ttl_s,
        time.time(),
        keys.DONE_CHANNEL,
        only_from,
        token_arg,
        keys.CALLBACKS_DUE_CHANNEL,
    ]


def _layout_for(client: object) -> Layout:
    """A cluster client spreads jobs over the cluster's buckets whatever this process's settings say."""
    if isinstance(client, redis.RedisCluster | aioredis.RedisCluster):
        return Layout(keys.CLUSTER_BUCKETS)
    return keys.layout()


def _record(flat: list[Any]) -> JobRecord | None:
    return JobRecord.parse(dict(zip(flat[::2], flat[1::2], strict=True))) if flat else None


def _transitions(raw_by_bucket: list[dict[Any, Any]]) -> dict[tuple[str, str], int]:
    """(from, to) -> state changes made, summed over buckets (scripts.TRANSITION)."""
    made: dict[tuple[str, str], int] = {}
    for raw in raw_by_bucket:
        for field, n in raw.items():
            src, _, dst = _s(field).partition(scripts.TRANSITION)
            made[(src, dst)] = made.get((src, dst), 0) + int(n)
    return made


def state_counts(made: dict[tuple[str, str], int], active: int) -> dict[str, int]:
    """Jobs per state from the state changes: in-stage states by what came in minus what went out,
    terminal states by what came in (every job that ended), `queued` as the active jobs in no stage
    (creating a job counts nothing)."""
    counts: dict[str, int] = {}
    for (src, dst), n in made.items():
        counts[dst] = counts.get(dst, 0) + n
        counts[src] = counts.get(src, 0) - n
    counts = {state: n for state, n in counts.items() if state in _STATES}
    counts[JobState.queued.value] = active - sum(counts.get(stage, 0) for stage in STAGES)
    return {state: n for state, n in counts.items() if n > 0}


def derived_stats(made: dict[tuple[str, str], int], by_state: dict[str, int]) -> dict[str, float]:
    """The counters metrics read that the scripts do not write: jobs_total:{terminal state} and
    stage_count:{stage} (runs of a stage: changes out of it, to the next stage or to an end)."""
    stats = {f"jobs_total:{s.value}": float(by_state.get(s.value, 0)) for s in JobState if s.terminal}
    for stage in STAGES:
        stats[f"stage_count:{stage}"] = float(sum(n for (src, _), n in made.items() if src == stage))
    return stats


def _sum_stats(raw_by_hash: list[dict[Any, Any]]) -> dict[str, float]:
    total: dict[str, float] = {}
    for raw in raw_by_hash:
        for name, value in raw.items():
            total[_s(name)] = total.get(_s(name), 0.0) + float(value)
    return total


@dataclass
class Reaped:
    """A stage whose worker stopped renewing its lease."""

    job_id: str
    stage: str
    infra_retries: int
    node: str


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
        self._create = client.register_script(scripts.CREATE)
        self._begin = client.register_script(scripts.BEGIN_STAGE)
        self._renew = client.register_script(scripts.RENEW)
        self._end = client.register_script(scripts.END_STAGE)
        self._release = client.register_script(scripts.RELEASE)
        self._reap = client.register_script(scripts.REAP)
        self._finalize = client.register_script(scripts.FINALIZE)
        self._take_ready = client.register_script(scripts.TAKE_READY_SLOT)
        self._revoke = client.register_script(scripts.REVOKE)
        self._ready_checked: dict[str, float] = {}
        """node -> when this process last looked for stale members of its READY set."""

    def keys(self, job_id: str) -> JobKeys:
        return self.layout.job_keys(job_id)

    def _queue(self, message: QueuedMessage) -> list[str]:
        """The message's list as a script's last key when the script pushes it (same Redis), else none."""
        return [message.key] if self.broker is None else []

    def _pushed(self, message: QueuedMessage) -> None:
        """Pushes a message the script left out (broker elsewhere)."""
        if self.broker is not None:
            self.broker.lpush(message.key, message.payload)

    def create(self, spec: JobSpec, task_ids: dict[str, str], init: QueuedMessage) -> bool:
        """Records the job and enqueues its init message; False (and nothing queued) when a job with this
        id exists already (idempotent resubmission)."""
        k = self.keys(spec.job_id)
        args = _create_args(spec, task_ids, self.ttl_s, init)
        if not self._create(keys=[k.job, k.active, *self._queue(init)], args=args):
            return False
        self._pushed(init)
        self.r.zadd(keys.JOBS_INDEX, {spec.job_id: args[3]})
        return True

    def enqueue(self, message: QueuedMessage) -> None:
        """Sends a stage message on its own (a stage sent again after its attempt was lost)."""
        (self.broker or self.r).lpush(message.key, message.payload)

    def get(self, job_id: str) -> JobRecord | None:
        return JobRecord.parse(self.r.hgetall(self.layout.job(job_id)))

    def begin_stage(self, job_id: str, stage: str, owner: str) -> tuple[str, JobRecord | None, int]:
        """Checks, leases and enters `stage` in one round trip; see scripts.BEGIN_STAGE."""
        k = self.keys(job_id)
        args: list[ScriptArg] = [stage, time.time(), job_id, owner, LEASE_TTL_S]
        verdict, flat, token, ready = self._begin(keys=[k.job, k.by_state, k.leases], args=args)
        self._left_ready(job_id, ready)
        return _s(verdict), _record(flat), int(token)

    def renew(self, leases: dict[str, int]) -> set[str]:
        """Renews every (job id -> token) lease; returns the job ids whose lease is lost."""
        expires = time.time() + LEASE_TTL_S
        lost = set()
        for job_id, token in leases.items():
            k = self.keys(job_id)
            if not self._renew(keys=[k.job, k.leases], args=[token, expires, job_id]):
                lost.add(job_id)
        return lost

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
        flat = [item for pair in pairs.items() for item in pair]
        args: list[ScriptArg] = [token, stage, elapsed_s, time.time(), job_id, following.payload, *flat]
        k = self.keys(job_id)
        if not self._end(keys=[k.job, k.stats, k.leases, *self._queue(following)], args=args):
            return False
        self._pushed(following)
        return True

    def release(self, job_id: str, token: int, restart_from_init: bool) -> int:
        """Gives the lease back unfinished so the stage can be sent again; the infra retry count or 0."""
        k = self.keys(job_id)
        args: list[ScriptArg] = [token, job_id, time.time(), "1" if restart_from_init else ""]
        retries, ready = self._release(keys=[k.job, k.stats, k.leases], args=args)
        self._left_ready(job_id, ready)
        return int(retries)

    def reap(self, limit: int = 100, tags: list[str] | None = None) -> list[Reaped]:
        """Takes every expired lease (of the buckets `tags`, default all) from its presumed-dead holder;
        see scripts.REAP."""
        now = time.time()
        reaped = []
        for tag in self.layout.tags() if tags is None else tags:
            for raw in self.r.zrangebyscore(keys.leases(tag), "-inf", now, start=0, num=limit):
                job_id = _s(raw)
                k = self.keys(job_id)
                row = self._reap(keys=[k.job, k.leases, k.stats], args=[job_id, now])
                if row:
                    stage, retries, node, ready = row
                    self._left_ready(job_id, ready)
                    reaped.append(Reaped(job_id, _s(stage), int(retries), _s(node)))
        return reaped

    def finalize(self, result: JobResult, only_from: str = "", token: int | None = None) -> bool:
        """Records the terminal result once; False if the job had already ended (or, with a token,
        if this attempt no longer holds the lease)."""
        args = _finalize_args(result, self.ttl_s, only_from, token)
        ended, ready = self._finalize(keys=_finalize_keys(self.keys(result.job_id)), args=args)
        self._left_ready(result.job_id, ready)
        return bool(ended)

    def take_ready_slot(self, job_id: str, node: str, limit: int) -> bool:
        """Whether the job holds one of the node's READY slots (taking a free one); see TAKE_READY_SLOT.
        When the node looks full, members whose job no longer holds the slot are cleared (at most every
        READY_SETTLE_S per node and process: a waiting init polls this)."""
        for attempt in range(2):
            taken = int(self._take_ready(keys=[keys.ready(node)], args=[job_id, time.time(), limit]))
            if taken == 2:
                self.r.hset(self.layout.job(job_id), JobField.READY_NODE, node)
            if taken or attempt or time.monotonic() - self._ready_checked.get(node, -1e9) < READY_SETTLE_S:
                return bool(taken)
            self._ready_checked[node] = time.monotonic()
            if not self._clear_stale_ready(node):
                return False
        return False

    def _clear_stale_ready(self, node: str, oldest: int = 4) -> int:
        """Drops the node's oldest members whose job is gone, over or holds its slot elsewhere (a job
        whose slot was given back by a worker that died before removing it); how many."""
        members = cast(
            list[tuple[Any, float]], self.r.zrange(keys.ready(node), 0, oldest - 1, withscores=True)
        )
        if not members:
            return 0
        pipe = self.r.pipeline(transaction=False)
        for member, _ in members:
            pipe.hmget(self.layout.job(_s(member)), JobField.STATE, JobField.READY_NODE)
        stale = [
            _s(member)
            for (member, taken), (state, ready) in zip(members, pipe.execute(), strict=True)
            if state is None
            or JobState(_s(state)).terminal
            or (_s(ready or b"") != node and time.time() - taken > READY_SETTLE_S)
        ]
        return int(self.r.zrem(keys.ready(node), *stale)) if stale else 0

    def drop_ready_slot(self, job_id: str) -> None:
        """Gives a job's READY slot back (what init made was discarded)."""
        job_key = self.layout.job(job_id)
        node = self.r.hget(job_key, JobField.READY_NODE)
        if node is not None:
            self.r.hdel(job_key, JobField.READY_NODE)
            self._left_ready(job_id, node)

    def forget_init(self, job_id: str) -> None:
        """Discards what init recorded (its sandbox is on a node no run worker serves): the job starts
        over from init."""
        self.drop_ready_slot(job_id)
        fields = (JobField.stage_done("init"), JobField.INIT_STATE, JobField.NODE)
        self.r.hdel(self.layout.job(job_id), *fields)

    def _left_ready(self, job_id: str, node: Any) -> None:
        """Removes the job from the READY set of `node` (named by a script that ended its hold)."""
        if node:
            self.r.zrem(keys.ready(_s(node)), job_id)

    def add_queued_time(self, job_id: str, seconds: float) -> None:
        """Time a started stage spent waiting (for a READY slot) counts as queued, not in-stage."""
        self.r.hincrbyfloat(self.layout.job(job_id), JobField.T_QUEUED, seconds)

    def is_revoked(self, job_id: str) -> bool:
        return self.r.zscore(self.keys(job_id).revoked, job_id) is not None

    def revoked_among(self, job_ids: list[str]) -> set[str]:
        by_tag: dict[str, list[str]] = {}
        for job_id in job_ids:
            by_tag.setdefault(self.layout.tag(job_id), []).append(job_id)
        found = set()
        for tag, ids in by_tag.items():
            scores = self.r.zmscore(keys.revoked(tag), ids)
            found |= {job_id for job_id, score in zip(ids, scores, strict=True) if score is not None}
        return found

    def active_ids(self) -> list[str]:
        return sorted(_s(m) for tag in self.layout.tags() for m in self.r.smembers(keys.active(tag)))

    def revoke(self, job_id: str) -> None:
        """Asks for the job's cancellation (see AsyncJobStore.revoke)."""
        k = self.keys(job_id)
        self._revoke(keys=[k.job, k.revoked], args=[job_id, time.time(), REVOKED_KEEP_S])

    def counts_by_state(self) -> dict[str, int]:
        """Jobs in each state now (terminal states: every job that ever ended, within the stats' life)."""
        tags = self.layout.tags()
        made = _transitions([self.r.hgetall(keys.by_state(tag)) for tag in tags])
        return state_counts(made, sum(int(self.r.scard(keys.active(tag))) for tag in tags))

    def count_infra_retry(self, job_id: str) -> int:
        """Counts a stage sent again outside a script (the stall sweep); the job's retry count."""
        k = self.keys(job_id)
        retries = int(self.r.hincrby(k.job, JobField.INFRA_RETRIES, 1))
        self.r.hincrby(k.stats, "retries_total:infra", 1)
        return retries

    def prune_index(self) -> None:
        """Drops the viewer's index entries past the result TTL."""
        self.r.zremrangebyscore(keys.JOBS_INDEX, 0, time.time() - self.ttl_s)


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
        self._create = client.register_script(scripts.CREATE)
        self._finalize = client.register_script(scripts.FINALIZE)
        self._revoke = client.register_script(scripts.REVOKE)

    def keys(self, job_id: str) -> JobKeys:
        return self.layout.job_keys(job_id)

    async def create(self, spec: JobSpec, task_ids: dict[str, str], init: QueuedMessage) -> bool:
        k = self.keys(spec.job_id)
        args = _create_args(spec, task_ids, self.ttl_s, init)
        queue = [init.key] if self.broker is None else []
        if not await self._create(keys=[k.job, k.active, *queue], args=args):
            return False
        if self.broker is not None:
            await self.broker.lpush(init.key, init.payload)
        await self.r.zadd(keys.JOBS_INDEX, {spec.job_id: args[3]})
        return True

    async def get(self, job_id: str) -> JobRecord | None:
        return JobRecord.parse(await self.r.hgetall(self.layout.job(job_id)))

    async def peek(self, job_id: str) -> JobPeek | None:
        state, result = await self.r.hmget(self.layout.job(job_id), JobField.STATE, JobField.RESULT)
        if state is None:
            return None
        return JobPeek(JobState(_s(state)), _s(result) if result is not None else None)

    async def get_many(self, job_ids: list[str]) -> list[JobRecord | None]:
        pipe = self.r.pipeline(transaction=False)
        for job_id in job_ids:
            pipe.hgetall(self.layout.job(job_id))
        return [JobRecord.parse(raw) for raw in await pipe.execute()]

    async def finalize(self, result: JobResult, only_from: str = "") -> bool:
        """Like JobStore.finalize; `only_from="queued"` ends a job only if no stage has started (so
        it never holds a READY slot)."""
        args = _finalize_args(result, self.ttl_s, only_from, None)
        ended, ready = await self._finalize(keys=_finalize_keys(self.keys(result.job_id)), args=args)
        if ready:
            await self.r.zrem(keys.ready(_s(ready)), result.job_id)
        return bool(ended)

    async def revoke(self, job_id: str) -> None:
        """Asks for the job's cancellation: a stage that starts finds it in the job's hash, a running
        one at its monitor's next poll of the revoked set (scripts.REVOKE)."""
        k = self.keys(job_id)
        await self._revoke(keys=[k.job, k.revoked], args=[job_id, time.time(), REVOKED_KEEP_S])

    async def active_ids(self) -> list[str]:
        members = [m for tag in self.layout.tags() for m in await self.r.smembers(keys.active(tag))]
        return sorted(_s(m) for m in members)

    async def active_count(self) -> int:
        return sum([int(await self.r.scard(keys.active(tag))) for tag in self.layout.tags()])

    async def _transitions(self) -> dict[tuple[str, str], int]:
        return _transitions([await self.r.hgetall(keys.by_state(tag)) for tag in self.layout.tags()])

    async def counts_by_state(self) -> dict[str, int]:
        return state_counts(await self._transitions(), await self.active_count())

    async def stats(self) -> dict[str, float]:
        """The farm's counters: every bucket's job statistics, those derived from the state changes,
        and the farm-wide ones (gateway)."""
        hashes = [keys.STATS, *(keys.job_stats(tag) for tag in self.layout.tags())]
        made = await self._transitions()
        derived = derived_stats(made, state_counts(made, await self.active_count()))
        return _sum_stats([await self.r.hgetall(name) for name in hashes]) | derived
