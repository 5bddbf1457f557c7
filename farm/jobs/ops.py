"""Every job-store operation written once, as an Op (farm/redis_ops.py): its scripts and commands, its
keys and arguments, how its replies are read. `JobStore` runs them on the workers' sync client,
`AsyncJobStore` on the API's asyncio one (farm/jobs/store.py).

When the Celery broker is another Redis (FARM_BROKER_URL), a stage message is pushed right after the
script that records its stage instead of inside it, and the stall sweep (tasks/reaper.py) re-sends a
message lost between the two.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from redis.client import Pipeline

from farm import keys
from farm.jobs import scripts
from farm.jobs.messages import QueuedMessage
from farm.jobs.record import JobFields, JobPeek, JobRecord, StageHandoff
from farm.jobs.spec import JobSpec
from farm.jobs.tally import derived_stats, state_counts, sum_stats, transitions
from farm.keys import JobField, JobKeys, Layout
from farm.models.failures import infrastructure_failure
from farm.models.results import STAGES, JobResult, JobState
from farm.models.termination import stamp as stamp_termination
from farm.redis_ops import Batch, Command, On, Op, Script
from farm.text import as_text as _s

REVOKED_KEEP_S = 24 * 3600
READY_SETTLE_S = 5.0
"""A READY member this young is never taken for stale: its job may not have recorded `ready_node` yet."""
LEASE_TTL_S = 6.0
"""A running stage renews its lease every LEASE_TTL_S / 3; a lease this old means the worker is gone."""
ScriptArg = str | int | float
"""What a Lua script accepts in ARGV."""
# kombu's Redis transport stores priorities 3, 6 and 9 in lists named queue + "\x06\x16" + priority.
_PRIORITY_SUFFIXES = ("", "\x06\x163", "\x06\x166", "\x06\x169")


@dataclass
class Reaped:
    """A stage whose worker stopped renewing its lease."""

    job_id: str
    stage: str
    infra_retries: int
    node: str


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


def _finalize_args(result: JobResult, ttl_s: int, only_from: str, token: int | None) -> list[Any]:
    stamp_termination(result)  # every result names why its trajectory ended (farm/models/termination.py)
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


def _flat(fields: dict[str, str]) -> list[ScriptArg]:
    """A hash's fields as a script's ARGV tail: field, value, field, value, ..."""
    return [item for pair in fields.items() for item in pair]


def _record(flat: list[Any]) -> JobRecord | None:
    return JobRecord.parse(dict(zip(flat[::2], flat[1::2], strict=True))) if flat else None


def _hgetall(name: str) -> Command:
    return Command(lambda r: r.hgetall(name))


def _smembers(name: str) -> Command:
    return Command(lambda r: r.smembers(name))


def _scard(name: str) -> Command:
    return Command(lambda r: r.scard(name))


def _zmscore(name: str, members: list[str]) -> Command:
    return Command(lambda r: r.zmscore(name, members))


def _expired(leases: str, now: float, limit: int) -> Command:
    """Up to `limit` members of a lease set whose lease ended by `now`."""
    return Command(lambda r: r.zrangebyscore(leases, "-inf", now, start=0, num=limit))


class JobOps:
    """The operations on the jobs of one layout (a plain Redis or a cluster's buckets)."""

    def __init__(self, layout: Layout, ttl_s: int, separate_broker: bool, cluster: bool = False) -> None:
        self.layout = layout
        self.ttl_s = ttl_s
        self.separate_broker = separate_broker
        """False: the broker is the jobs' Redis, and scripts push stage messages themselves."""
        self.cluster = cluster
        """True: farm-wide keys (the viewer's index) lie in other slots than a job's, so no job script
        may touch them."""
        self._ready_checked: dict[str, float] = {}
        """node -> when this process last looked for stale members of its READY set."""

    def keys(self, job_id: str) -> JobKeys:
        return self.layout.job_keys(job_id)

    def _queue(self, message: QueuedMessage) -> list[str]:
        """The message's list as a script's last key when the script pushes it (same Redis), else none."""
        return [] if self.separate_broker else [message.key]

    def _pushed(self, message: QueuedMessage) -> Op[None]:
        """Pushes a message the script left out (broker elsewhere)."""
        if self.separate_broker:
            yield from self.enqueue(message)

    def enqueue(self, message: QueuedMessage) -> Op[None]:
        """Sends a stage message on its own (a stage sent again after its attempt was lost)."""
        yield Command(lambda r: r.lpush(message.key, message.payload), On.BROKER)

    def _left_ready(self, job_id: str, node: Any) -> Op[None]:
        """Removes the job from the READY set of `node` (named by a script that ended its hold)."""
        if node:
            yield Command(lambda r: r.zrem(keys.ready(_s(node)), job_id))

    # --- a job's life ----------------------------------------------------------------------------------

    def create(self, spec: JobSpec, task_ids: dict[str, str], init: QueuedMessage) -> Op[bool]:
        """Records the job and enqueues its init message; False (and nothing queued) when a job with this
        id exists already (idempotent resubmission)."""
        k = self.keys(spec.job_id)
        index = [] if self.cluster else [keys.JOBS_INDEX]  # on a cluster, another slot: written apart
        args = [*_create_args(spec, task_ids, self.ttl_s, init), "1" if index else ""]
        if not index:  # NX: a resubmission keeps its entry
            yield Command(lambda r: r.zadd(keys.JOBS_INDEX, {spec.job_id: args[3]}, nx=True))
        if not (yield Script(scripts.CREATE, [k.job, k.active, *index, *self._queue(init)], args)):
            return False
        yield from self._pushed(init)
        return True

    def begin_stage(self, job_id: str, stage: str, owner: str) -> Op[tuple[str, JobRecord | None, int]]:
        """Checks, leases and enters `stage` in one round trip; see scripts.BEGIN_STAGE."""
        k = self.keys(job_id)
        args: list[ScriptArg] = [stage, time.time(), job_id, owner, LEASE_TTL_S]
        verdict, flat, token, ready = yield Script(scripts.BEGIN_STAGE, [k.job, k.by_state, k.leases], args)
        yield from self._left_ready(job_id, ready)
        return _s(verdict), _record(flat), int(token)

    def renew(self, leases: dict[str, int]) -> Op[set[str]]:
        """Renews every (job id -> token) lease, one round trip per bucket; returns the job ids whose
        lease is lost."""
        expires = time.time() + LEASE_TTL_S
        by_bucket: dict[str, list[tuple[str, int]]] = {}
        for job_id, token in leases.items():
            by_bucket.setdefault(self.layout.tag(job_id), []).append((job_id, token))
        lost: set[str] = set()
        for tag, held in by_bucket.items():
            job_keys = [self.layout.job(job_id) for job_id, _ in held]
            args: list[ScriptArg] = [expires, *(x for job_id, token in held for x in (token, job_id))]
            gone = yield Script(scripts.RENEW, [keys.leases(tag), *job_keys], args)
            lost |= {_s(job_id) for job_id in gone}
        return lost

    def end_stage(
        self, job_id: str, token: int, stage: str, elapsed_s: float, following: QueuedMessage,
        handoff: StageHandoff | None = None,
    ) -> Op[bool]:  # fmt: skip
        """Records the stage's time and what it hands off, marks it done, gives the lease back and
        enqueues the `following` stage, in one step. False if this attempt no longer holds the lease
        (nothing is written or sent)."""
        args: list[ScriptArg] = [token, stage, elapsed_s, time.time(), job_id, following.payload]
        args += _flat(handoff.fields() if handoff else {})
        k = self.keys(job_id)
        if not (yield Script(scripts.END_STAGE, [k.job, k.stats, k.leases, *self._queue(following)], args)):
            return False
        yield from self._pushed(following)
        return True

    def release(self, job_id: str, token: int, restart_from_init: bool) -> Op[int]:
        """Gives the lease back unfinished so the stage can be sent again; the infra retry count or 0."""
        k = self.keys(job_id)
        args: list[ScriptArg] = [token, job_id, time.time(), "1" if restart_from_init else ""]
        retries, ready = yield Script(scripts.RELEASE, [k.job, k.stats, k.leases], args)
        yield from self._left_ready(job_id, ready)
        return int(retries)

    def reap(self, limit: int = 100, tags: list[str] | None = None) -> Op[list[Reaped]]:
        """Takes every expired lease (of the buckets `tags`, default all) from its presumed-dead holder;
        see scripts.REAP."""
        now = time.time()
        reaped = []
        for tag in self.layout.tags() if tags is None else tags:
            for raw in (yield _expired(keys.leases(tag), now, limit)):
                job_id = _s(raw)
                k = self.keys(job_id)
                row = yield Script(scripts.REAP, [k.job, k.leases, k.stats], [job_id, now])
                if row:
                    stage, retries, node, ready = row
                    yield from self._left_ready(job_id, ready)
                    reaped.append(Reaped(job_id, _s(stage), int(retries), _s(node)))
        return reaped

    def finalize(self, result: JobResult, only_from: str = "", token: int | None = None) -> Op[bool]:
        """Records the terminal result once; False if the job had already ended (or, with a token, if
        this attempt no longer holds the lease). `only_from="queued"` ends a job only if no stage has
        started (so it never holds a READY slot)."""
        k = self.keys(result.job_id)
        finalize_keys = [k.job, k.active, k.by_state, k.stats, k.leases, k.callbacks]
        args = _finalize_args(result, self.ttl_s, only_from, token)
        ended, ready = yield Script(scripts.FINALIZE, finalize_keys, args)
        yield from self._left_ready(result.job_id, ready)
        if ended and (failure := infrastructure_failure(result)) is not None:
            field = f"{keys.INFRA_FAILURES}{failure}"  # for /metrics: the infrastructure-failure rate
            yield Command(lambda r: r.hincrby(k.stats, field, 1))
        return bool(ended)

    def revoke(self, job_id: str) -> Op[None]:
        """Asks for the job's cancellation: a stage that starts finds it in the job's hash, a running
        one at its monitor's next poll of the revoked set (scripts.REVOKE)."""
        k = self.keys(job_id)
        yield Script(scripts.REVOKE, [k.job, k.revoked], [job_id, time.time(), REVOKED_KEEP_S])

    def count_infra_retry(self, job_id: str) -> Op[int]:
        """Counts a stage sent again outside a script (the stall sweep); the job's retry count (-1: the
        job is gone)."""
        k = self.keys(job_id)
        return int((yield Script(scripts.COUNT_INFRA_RETRY, [k.job, k.stats])))

    def add_queued_time(self, job_id: str, seconds: float) -> Op[None]:
        """Time a started stage spent waiting (for a READY slot) counts as queued, not in-stage."""
        yield Script(scripts.ADD_IF_LIVE, [self.layout.job(job_id)], [JobField.T_QUEUED, seconds])

    def _set_fields(self, job_id: str, fields: dict[str, str]) -> Op[bool]:
        """Writes plain fields of a job that still exists (False: it is gone, nothing written)."""
        return bool((yield Script(scripts.SET_IF_LIVE, [self.layout.job(job_id)], _flat(fields))))

    def mark_pinned(self, job_id: str) -> Op[bool]:
        """Remembers that the job uses a backend, so whichever stage ends it releases its pin (False: the
        job is gone)."""
        return (yield from self._set_fields(job_id, {JobField.BACKEND_PINNED: "1"}))

    # --- READY slots -------------------------------------------------------------------------------

    def take_ready_slot(self, job_id: str, node: str, limit: int) -> Op[bool]:
        """Whether the job holds one of the node's READY slots (taking a free one); see TAKE_READY_SLOT.
        When the node looks full, members whose job no longer holds the slot are cleared (at most every
        READY_SETTLE_S per node and process: a waiting init polls this)."""
        for attempt in range(2):
            args: list[ScriptArg] = [job_id, time.time(), limit]
            taken = int((yield Script(scripts.TAKE_READY_SLOT, [keys.ready(node)], args)))
            if taken == 2:
                yield from self._set_fields(job_id, {JobField.READY_NODE: node})
            if taken or attempt or time.monotonic() - self._ready_checked.get(node, -1e9) < READY_SETTLE_S:
                return bool(taken)
            self._ready_checked[node] = time.monotonic()
            if not (yield from self._clear_stale_ready(node)):
                return False
        return False

    def _clear_stale_ready(self, node: str, oldest: int = 4) -> Op[int]:
        """Drops the node's oldest members whose job is gone, over or holds its slot elsewhere (a job
        whose slot was given back by a worker that died before removing it); how many."""
        ready = keys.ready(node)
        members: list[tuple[Any, float]] = yield Command(
            lambda r: r.zrange(ready, 0, oldest - 1, withscores=True)
        )
        if not members:
            return 0

        def queue(pipe: Pipeline) -> None:
            for member, _ in members:
                pipe.hmget(self.layout.job(_s(member)), JobField.STATE, JobField.READY_NODE)

        holders = yield Batch(queue)
        stale = [
            _s(member)
            for (member, taken), (state, ready_node) in zip(members, holders, strict=True)
            if state is None
            or JobState(_s(state)).terminal
            or (_s(ready_node or b"") != node and time.time() - taken > READY_SETTLE_S)
        ]
        return int((yield Command(lambda r: r.zrem(ready, *stale)))) if stale else 0

    def drop_ready_slot(self, job_id: str) -> Op[None]:
        """Gives a job's READY slot back (what init made was discarded)."""
        job_key = self.layout.job(job_id)
        node = yield Command(lambda r: r.hget(job_key, JobField.READY_NODE))
        if node is not None:
            yield Command(lambda r: r.hdel(job_key, JobField.READY_NODE))
            yield from self._left_ready(job_id, node)

    def forget_init(self, job_id: str) -> Op[None]:
        """Discards what init recorded (its sandbox is on a node no run worker serves): the job starts
        over from init."""
        yield from self.drop_ready_slot(job_id)
        fields = (JobField.stage_done("init"), JobField.INIT_STATE, JobField.NODE)
        yield Command(lambda r: r.hdel(self.layout.job(job_id), *fields))

    # --- reading -----------------------------------------------------------------------------------

    def exists(self, job_id: str) -> Op[bool]:
        return bool((yield Command(lambda r: r.exists(self.layout.job(job_id)))))

    def get(self, job_id: str) -> Op[JobRecord | None]:
        return JobRecord.parse((yield _hgetall(self.layout.job(job_id))))

    def peek(self, job_id: str) -> Op[JobPeek | None]:
        job_key = self.layout.job(job_id)
        state, result = yield Command(lambda r: r.hmget(job_key, JobField.STATE, JobField.RESULT))
        if state is None:
            return None
        return JobPeek(JobState(_s(state)), _s(result) if result is not None else None)

    def get_many(self, job_ids: list[str]) -> Op[list[JobRecord | None]]:
        def queue(pipe: Pipeline) -> None:
            for job_id in job_ids:
                pipe.hgetall(self.layout.job(job_id))

        raw_jobs = yield Batch(queue)
        return [JobRecord.parse(raw) for raw in raw_jobs]

    def is_revoked(self, job_id: str) -> Op[bool]:
        revoked = self.keys(job_id).revoked
        return (yield Command(lambda r: r.zscore(revoked, job_id))) is not None

    def revoked_among(self, job_ids: list[str]) -> Op[set[str]]:
        by_tag: dict[str, list[str]] = {}
        for job_id in job_ids:
            by_tag.setdefault(self.layout.tag(job_id), []).append(job_id)
        found = set()
        for tag, ids in by_tag.items():
            scores = yield _zmscore(keys.revoked(tag), ids)
            found |= {job_id for job_id, score in zip(ids, scores, strict=True) if score is not None}
        return found

    def active_ids(self) -> Op[list[str]]:
        members = []
        for tag in self.layout.tags():
            members.extend((yield _smembers(keys.active(tag))))
        return sorted(_s(m) for m in members)

    def active_count(self) -> Op[int]:
        count = 0
        for tag in self.layout.tags():
            count += int((yield _scard(keys.active(tag))))
        return count

    def transitions(self) -> Op[dict[tuple[str, str], int]]:
        by_bucket = []
        for tag in self.layout.tags():
            by_bucket.append((yield _hgetall(keys.by_state(tag))))
        return transitions(by_bucket)

    def counts_by_state(self) -> Op[dict[str, int]]:
        """Jobs in each state now (terminal states: every job that ever ended, within the stats' life)."""
        made = yield from self.transitions()
        return state_counts(made, (yield from self.active_count()))

    def stats(self) -> Op[dict[str, float]]:
        """The farm's counters: every bucket's job statistics, those derived from the state changes,
        and the farm-wide ones (gateway)."""
        hashes = [keys.STATS, *(keys.job_stats(tag) for tag in self.layout.tags())]
        made = yield from self.transitions()
        derived = derived_stats(made, state_counts(made, (yield from self.active_count())))
        raw = []
        for name in hashes:
            raw.append((yield _hgetall(name)))
        return sum_stats(raw) | derived

    def queue_depths(self, queues: list[str]) -> Op[dict[str, int]]:
        """Messages waiting in each stage queue, read from the broker (kombu keeps one list per queue and
        priority)."""

        def queue(pipe: Pipeline) -> None:
            for name in queues:
                for suffix in _PRIORITY_SUFFIXES:
                    pipe.llen(name + suffix)

        counts = yield Batch(queue, on=On.BROKER)
        step = len(_PRIORITY_SUFFIXES)
        return {name: sum(counts[i * step : (i + 1) * step]) for i, name in enumerate(queues)}

    def ready_by_node(self, nodes: set[str]) -> Op[dict[str, int]]:
        """READY slots held on each of `nodes`: sandboxes being prepared or awaiting run."""
        ordered = sorted(nodes)

        def queue(pipe: Pipeline) -> None:
            for node in ordered:
                pipe.zcard(keys.ready(node))

        counts = yield Batch(queue)
        return {node: int(n) for node, n in zip(ordered, counts, strict=True)}

    def _read(self, job_ids: list[str], fields: tuple[str, ...]) -> Op[list[JobFields]]:
        """The named fields of each job's hash, in one pipeline (a field or job that is gone: absent)."""

        def queue(pipe: Pipeline) -> None:
            for job_id in job_ids:
                pipe.hmget(self.layout.job(job_id), *fields)

        rows = yield Batch(queue)
        return [JobFields({f: _s(v) for f, v in zip(fields, row, strict=True) if v}) for row in rows]

    def specs(self, job_ids: list[str]) -> Op[list[JobSpec | None]]:
        """Each job's spec (None: gone), without the rest of its record (cancellation by group)."""
        jobs = yield from self._read(job_ids, (JobField.SPEC,))
        return [JobSpec.model_validate_json(j.fields[JobField.SPEC]) if j.fields else None for j in jobs]

    def progress(self, job_id: str) -> Op[JobRecord | None]:
        """The job's record without its outputs or result: its spec, state and stage times (None: gone)."""
        times = (JobField.T_QUEUED, *(JobField.stage_time(stage) for stage in STAGES))
        (job,) = yield from self._read([job_id], (JobField.SPEC, JobField.STATE, *times))
        return JobRecord.parse(job.fields)

    def sandbox_claims(self, job_ids: list[str]) -> Op[list[JobFields]]:
        """What the orphan sweep reads of each job: whether it is over, its lease, its init's sandbox."""
        return (yield from self._read(job_ids, (JobField.STATE, JobField.LEASE_EXPIRES, JobField.INIT_STATE)))

    def queued_since(self, job_ids: list[str]) -> Op[dict[str, float]]:
        """When each of `job_ids` that waits in a queue with no stage holding its lease was last put
        there (the stall sweep's suspects; jobs gone, leased or not enqueued are left out)."""
        jobs = yield from self._read(job_ids, (JobField.STATE, JobField.ENQUEUED_AT, JobField.LEASE_TOKEN))
        return {
            job_id: float(job.fields[JobField.ENQUEUED_AT])
            for job_id, job in zip(job_ids, jobs, strict=True)
            if JobField.STATE in job.fields and JobField.ENQUEUED_AT in job.fields and not job.leased
        }

    def queued_messages(self, lists: list[str]) -> Op[list[bytes]]:
        """Every message waiting in the broker's `lists` (the stall sweep's scan)."""

        def queue(pipe: Pipeline) -> None:
            for name in lists:
                pipe.lrange(name, 0, -1)

        return [message for batch in (yield Batch(queue, on=On.BROKER)) for message in batch]

    # --- farm-wide switches and locks --------------------------------------------------------------

    def take_lock(self, name: str, owner: str, ttl_ms: int) -> Op[bool]:
        """Takes the lock `name` for `ttl_ms` unless someone holds it (SET NX): the reaper's lead, the
        stall sweep, a host's orphan sweep."""
        return bool((yield Command(lambda r: r.set(name, owner, nx=True, px=ttl_ms))))

    def is_draining(self, hostname: str) -> Op[bool]:
        return bool((yield Command(lambda r: r.exists(keys.draining(hostname)))))

    def mark_draining(self, hostname: str, ttl_s: int = 120) -> Op[None]:
        """The worker `hostname` is shutting down: its pool children give their stages back."""
        yield Command(lambda r: r.set(keys.draining(hostname), "1", ex=ttl_s))

    def clear_draining(self, hostname: str) -> Op[None]:
        yield Command(lambda r: r.delete(keys.draining(hostname)))

    def accepting(self) -> Op[bool]:
        """Whether the farm takes new work (POST /stop and /start)."""
        return bool((yield Command(lambda r: r.get(keys.ACCEPTING))) != b"0")

    def set_accepting(self, value: bool) -> Op[None]:
        yield Command(lambda r: r.set(keys.ACCEPTING, "1" if value else "0"))

    def prune_index(self) -> Op[None]:
        """Drops the viewer's index entries past the result TTL."""
        cutoff = time.time() - self.ttl_s
        yield Command(lambda r: r.zremrangebyscore(keys.JOBS_INDEX, 0, cutoff))
