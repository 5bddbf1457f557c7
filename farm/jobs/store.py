"""Reading and writing job records. Workers use `JobStore` (sync), the API `AsyncJobStore`."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any, Protocol

import redis
import redis.asyncio as aioredis

from farm import keys
from farm.jobs import scripts
from farm.jobs.messages import QueuedMessage
from farm.jobs.spec import JobSpec
from farm.models.results import STAGES, JobResult, JobState, StageError, Timings
from farm.text import as_text as _s

REVOKED_KEEP_S = 24 * 3600
ScriptArg = str | int | float
"""What a Lua script accepts in ARGV."""


@dataclass
class JobPeek:
    """A job's state and, once it has ended, its result exactly as stored (JSON)."""

    state: JobState
    result_json: str | None

    @property
    def terminal(self) -> bool:
        return self.state.terminal


@dataclass
class JobRecord:
    """A parsed view of `farm:job:{id}`."""

    spec: JobSpec
    state: JobState
    task_ids: dict[str, str]
    fields: dict[str, str]

    @classmethod
    def parse(cls, raw: dict[Any, Any]) -> JobRecord | None:
        if not raw:
            return None
        fields = {_s(k): _s(v) for k, v in raw.items()}
        if "spec" not in fields:
            return None
        return cls(
            spec=JobSpec.model_validate_json(fields["spec"]),
            state=JobState(fields["state"]),
            task_ids=json.loads(fields.get("task_ids", "{}")),
            fields=fields,
        )

    @property
    def job_id(self) -> str:
        return self.spec.job_id

    @property
    def result(self) -> JobResult | None:
        raw = self.fields.get("result")
        return JobResult.model_validate_json(raw) if raw else None

    @property
    def node(self) -> str | None:
        return self.fields.get("node")

    @property
    def metadata(self) -> dict[str, Any]:
        return self.spec.metadata

    def timings(self) -> Timings:
        values = {stage: float(self.fields.get(f"t_{stage}", 0.0)) for stage in STAGES}
        return Timings(queued=float(self.fields.get("t_queued", 0.0)), **values)

    def stage_done(self, stage: str) -> bool:
        return self.fields.get(f"done:{stage}") == "1"

    def output(self, name: str) -> dict[str, Any] | None:
        raw = self.fields.get(name)
        return json.loads(raw) if raw else None

    def snapshot_json(self) -> str:
        """snapshot() as JSON; a stored result is returned as stored (no parse, no re-encode: results
        carry every token id of every trace)."""
        return self.fields.get("result") or self.snapshot().model_dump_json()

    def snapshot(self) -> JobResult:
        """The result if terminal, else a progress view with the state it is in now."""
        done = self.result
        if done is not None:
            return done
        return terminal_result(self, self.state)


class ResultSource(Protocol):
    """What a terminal result is built from: a stored record, or a running stage's context."""

    @property
    def spec(self) -> JobSpec: ...

    @property
    def metadata(self) -> dict[str, Any]: ...

    def timings(self) -> Timings: ...


def terminal_result(
    source: ResultSource, state: JobState, error: StageError | None = None, **extra: Any
) -> JobResult:
    """The one builder of a result for a job that ends outside the handler's own final_result: a
    failed stage, a cancellation, a spent budget, a lost worker."""
    return JobResult(
        job_id=source.spec.job_id,
        state=state,
        handler=source.spec.handler,
        timings=source.timings(),
        error=error,
        metadata=source.metadata,
        **extra,
    )


LEASE_TTL_S = 6.0
"""A running stage renews its lease every LEASE_TTL_S / 3; a lease this old means the worker is gone."""


def _create_args(spec: JobSpec, task_ids: dict[str, str], ttl_s: int, init: QueuedMessage) -> list[Any]:
    spec_json = spec.model_dump_json()
    return [
        spec.job_id,
        spec_json,
        json.dumps(task_ids),
        time.time(),
        ttl_s,
        spec.timeout_s,
        spec.callback_url or "",
        init.payload,
    ]


def _create_keys(job_id: str, init: QueuedMessage) -> list[str]:
    return [keys.job(job_id), keys.ACTIVE_JOBS, keys.JOBS_BY_STATE, init.key, keys.JOBS_INDEX]


def _finalize_keys(job_id: str) -> list[str]:
    return [
        keys.job(job_id),
        keys.ACTIVE_JOBS,
        keys.JOBS_BY_STATE,
        keys.STATS,
        keys.LEASES,
        keys.CALLBACKS,
    ]


def _finalize_args(result: JobResult, ttl_s: int, only_from: str, token: int | None) -> list[Any]:
    result.metadata.setdefault("finished_at", time.time())
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
    ]


@dataclass
class Reaped:
    """A stage whose worker stopped renewing its lease."""

    job_id: str
    stage: str
    infra_retries: int
    node: str


class JobStore:
    def __init__(self, client: redis.Redis, ttl_s: int) -> None:
        self.r = client
        self.ttl_s = ttl_s
        self._create = client.register_script(scripts.CREATE)
        self._begin = client.register_script(scripts.BEGIN_STAGE)
        self._renew = client.register_script(scripts.RENEW)
        self._end = client.register_script(scripts.END_STAGE)
        self._release = client.register_script(scripts.RELEASE)
        self._reap = client.register_script(scripts.REAP)
        self._finalize = client.register_script(scripts.FINALIZE)
        self._take_ready = client.register_script(scripts.TAKE_READY_SLOT)
        self._drop_ready = client.register_script(scripts.DROP_READY)

    def create(self, spec: JobSpec, task_ids: dict[str, str], init: QueuedMessage) -> bool:
        """Records the job and enqueues its init message together; False (and nothing queued) when a job
        with this id exists already (idempotent resubmission)."""
        args = _create_args(spec, task_ids, self.ttl_s, init)
        return bool(self._create(keys=_create_keys(spec.job_id, init), args=args))

    def enqueue(self, message: QueuedMessage) -> None:
        """Sends a stage message on its own (a stage sent again after its attempt was lost)."""
        self.r.lpush(message.key, message.payload)

    def get(self, job_id: str) -> JobRecord | None:
        return JobRecord.parse(self.r.hgetall(keys.job(job_id)))

    def begin_stage(self, job_id: str, stage: str, owner: str) -> tuple[str, JobRecord | None, int]:
        """Checks, leases and enters `stage` in one round trip; see scripts.BEGIN_STAGE."""
        keys_ = [keys.job(job_id), keys.JOBS_BY_STATE, keys.REVOKED, keys.LEASES]
        verdict, flat, token = self._begin(keys=keys_, args=[stage, time.time(), job_id, owner, LEASE_TTL_S])
        record = JobRecord.parse(dict(zip(flat[::2], flat[1::2], strict=True))) if flat else None
        return _s(verdict), record, int(token)

    def renew(self, leases: dict[str, int]) -> set[str]:
        """Renews every (job id -> token) lease in one pipeline; returns the job ids whose lease is lost."""
        if not leases:
            return set()
        expires = time.time() + LEASE_TTL_S
        pipe = self.r.pipeline(transaction=False)
        for job_id, token in leases.items():
            self._renew(keys=[keys.job(job_id), keys.LEASES], args=[token, expires, job_id], client=pipe)
        return {job_id for job_id, ok in zip(leases, pipe.execute(), strict=True) if not ok}

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
        job_keys = [keys.job(job_id), keys.STATS, keys.LEASES, following.key]
        return bool(self._end(keys=job_keys, args=args))

    def release(self, job_id: str, token: int, restart_from_init: bool) -> int:
        """Gives the lease back unfinished so the stage can be sent again; the infra retry count or 0."""
        args: list[ScriptArg] = [token, job_id, time.time(), "1" if restart_from_init else ""]
        return int(self._release(keys=[keys.job(job_id), keys.STATS, keys.LEASES], args=args))

    def reap(self, limit: int = 100) -> list[Reaped]:
        rows = self._reap(keys=[keys.LEASES, keys.STATS], args=[time.time(), limit])
        return [Reaped(_s(j), _s(stage), int(n), _s(node)) for j, stage, n, node in rows]

    def finalize(self, result: JobResult, only_from: str = "", token: int | None = None) -> bool:
        """Records the terminal result once; False if the job had already ended (or, with a token,
        if this attempt no longer holds the lease)."""
        args = _finalize_args(result, self.ttl_s, only_from, token)
        return bool(self._finalize(keys=_finalize_keys(result.job_id), args=args))

    def take_ready_slot(self, job_id: str, node: str, limit: int) -> bool:
        """Whether the job holds one of the node's READY slots (taking a free one); see TAKE_READY_SLOT."""
        args: list[ScriptArg] = [job_id, time.time(), limit, node]
        return bool(self._take_ready(keys=[keys.ready(node), keys.job(job_id)], args=args))

    def drop_ready_slot(self, job_id: str) -> None:
        self._drop_ready(keys=[keys.job(job_id)], args=[job_id])

    def add_queued_time(self, job_id: str, seconds: float) -> None:
        """Time a started stage spent waiting (for a READY slot) counts as queued, not in-stage."""
        self.r.hincrbyfloat(keys.job(job_id), "t_queued", seconds)

    def is_revoked(self, job_id: str) -> bool:
        return self.r.zscore(keys.REVOKED, job_id) is not None

    def revoked_among(self, job_ids: list[str]) -> set[str]:
        if not job_ids:
            return set()
        scores = self.r.zmscore(keys.REVOKED, job_ids)
        return {job_id for job_id, score in zip(job_ids, scores, strict=True) if score is not None}


class AsyncJobStore:
    def __init__(self, client: aioredis.Redis, ttl_s: int) -> None:
        self.r = client
        self.ttl_s = ttl_s
        self._create = client.register_script(scripts.CREATE)
        self._finalize = client.register_script(scripts.FINALIZE)

    async def create(self, spec: JobSpec, task_ids: dict[str, str], init: QueuedMessage) -> bool:
        args = _create_args(spec, task_ids, self.ttl_s, init)
        return bool(await self._create(keys=_create_keys(spec.job_id, init), args=args))

    async def get(self, job_id: str) -> JobRecord | None:
        return JobRecord.parse(await self.r.hgetall(keys.job(job_id)))

    async def peek(self, job_id: str) -> JobPeek | None:
        state, result = await self.r.hmget(keys.job(job_id), "state", "result")
        if state is None:
            return None
        return JobPeek(JobState(_s(state)), _s(result) if result is not None else None)

    async def get_many(self, job_ids: list[str]) -> list[JobRecord | None]:
        pipe = self.r.pipeline(transaction=False)
        for job_id in job_ids:
            pipe.hgetall(keys.job(job_id))
        return [JobRecord.parse(raw) for raw in await pipe.execute()]

    async def finalize(self, result: JobResult, only_from: str = "") -> bool:
        """Like JobStore.finalize; `only_from="queued"` ends a job only if no stage has started."""
        args = _finalize_args(result, self.ttl_s, only_from, None)
        return bool(await self._finalize(keys=_finalize_keys(result.job_id), args=args))

    async def revoke(self, job_id: str) -> None:
        now = time.time()
        pipe = self.r.pipeline(transaction=False)
        pipe.zadd(keys.REVOKED, {job_id: now})
        pipe.zremrangebyscore(keys.REVOKED, 0, now - REVOKED_KEEP_S)
        await pipe.execute()

    async def active_ids(self) -> list[str]:
        return sorted(_s(m) for m in await self.r.smembers(keys.ACTIVE_JOBS))

    async def counts_by_state(self) -> dict[str, int]:
        raw = await self.r.hgetall(keys.JOBS_BY_STATE)
        return {_s(k): int(v) for k, v in raw.items() if int(v) > 0}
