"""Reading and writing job records. Workers use `JobStore` (sync), the API `AsyncJobStore`."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

import redis
import redis.asyncio as aioredis

from farm import keys
from farm.jobs import scripts
from farm.jobs.spec import JobSpec
from farm.models.results import STAGES, JobResult, JobState, StageError, Timings

REVOKED_KEEP_S = 24 * 3600


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

    def timings(self) -> Timings:
        values = {stage: float(self.fields.get(f"t_{stage}", 0.0)) for stage in STAGES}
        return Timings(queued=float(self.fields.get("t_queued", 0.0)), **values)

    def stage_done(self, stage: str) -> bool:
        return self.fields.get(f"done:{stage}") == "1"

    def output(self, name: str) -> dict[str, Any] | None:
        raw = self.fields.get(name)
        return json.loads(raw) if raw else None

    def snapshot(self) -> JobResult:
        """The result if terminal, else a progress view with the state it is in now."""
        done = self.result
        if done is not None:
            return done
        return JobResult(
            job_id=self.job_id,
            state=self.state,
            handler=self.spec.handler,
            timings=self.timings(),
            metadata=self.spec.metadata,
        )


def terminal_result(
    record: JobRecord, state: JobState, error: StageError | None = None, **extra: Any
) -> JobResult:
    """A well-formed result for a job that ends outside the handler's own final_result."""
    return JobResult(
        job_id=record.job_id,
        state=state,
        handler=record.spec.handler,
        timings=record.timings(),
        error=error,
        metadata=record.spec.metadata,
        **extra,
    )


def _s(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


class JobStore:
    def __init__(self, client: redis.Redis, ttl_s: int) -> None:
        self.r = client
        self.ttl_s = ttl_s
        self._create = client.register_script(scripts.CREATE)
        self._begin = client.register_script(scripts.BEGIN_STAGE)
        self._finalize = client.register_script(scripts.FINALIZE)

    def create(self, spec: JobSpec, task_ids: dict[str, str]) -> bool:
        """False when a job with this id exists already (idempotent resubmission)."""
        args = [
            spec.job_id,
            spec.model_dump_json(),
            json.dumps(task_ids),
            time.time(),
            self.ttl_s,
            spec.timeout_s,
        ]
        return bool(
            self._create(keys=[keys.job(spec.job_id), keys.ACTIVE_JOBS, keys.JOBS_BY_STATE], args=args)
        )

    def get(self, job_id: str) -> JobRecord | None:
        return JobRecord.parse(self.r.hgetall(keys.job(job_id)))

    def begin_stage(self, job_id: str, stage: str) -> tuple[str, JobRecord | None]:
        """Checks and enters `stage` in one round trip; see scripts.BEGIN_STAGE for the verdicts."""
        keys_ = [keys.job(job_id), keys.JOBS_BY_STATE, keys.REVOKED]
        verdict, flat = self._begin(keys=keys_, args=[stage, time.time(), job_id])
        record = JobRecord.parse(dict(zip(flat[::2], flat[1::2], strict=True))) if flat else None
        return _s(verdict), record

    def end_stage(
        self, job_id: str, stage: str, elapsed_s: float, fields: dict[str, str] | None = None, **outputs: Any
    ) -> None:
        """Records the stage's time and JSON outputs (plus plain `fields`) and marks it done."""
        pipe = self.r.pipeline(transaction=True)
        key = keys.job(job_id)
        pipe.hincrbyfloat(key, f"t_{stage}", elapsed_s)
        mapping = {name: json.dumps(value) for name, value in outputs.items()} | (fields or {})
        mapping[f"done:{stage}"] = "1"
        mapping["enqueued_at"] = str(time.time())
        pipe.hset(key, mapping=mapping)
        pipe.hincrbyfloat(keys.STATS, f"stage_seconds_sum:{stage}", elapsed_s)
        pipe.hincrby(keys.STATS, f"stage_count:{stage}", 1)
        pipe.execute()

    def finalize(self, result: JobResult, only_from: str = "") -> bool:
        """Records the terminal result once; False if the job had already ended."""
        return bool(
            self._finalize(
                keys=[keys.job(result.job_id), keys.ACTIVE_JOBS, keys.JOBS_BY_STATE, keys.STATS],
                args=[
                    result.job_id,
                    result.state.value,
                    result.model_dump_json(),
                    self.ttl_s,
                    time.time(),
                    keys.DONE_CHANNEL,
                    only_from,
                ],
            )
        )

    def is_revoked(self, job_id: str) -> bool:
        return self.r.zscore(keys.REVOKED, job_id) is not None

    def revoke(self, job_id: str) -> None:
        now = time.time()
        pipe = self.r.pipeline(transaction=False)
        pipe.zadd(keys.REVOKED, {job_id: now})
        pipe.zremrangebyscore(keys.REVOKED, 0, now - REVOKED_KEEP_S)
        pipe.execute()


class AsyncJobStore:
    def __init__(self, client: aioredis.Redis, ttl_s: int) -> None:
        self.r = client
        self.ttl_s = ttl_s
        self._create = client.register_script(scripts.CREATE)
        self._finalize = client.register_script(scripts.FINALIZE)

    async def create(self, spec: JobSpec, task_ids: dict[str, str]) -> bool:
        args = [
            spec.job_id,
            spec.model_dump_json(),
            json.dumps(task_ids),
            time.time(),
            self.ttl_s,
            spec.timeout_s,
        ]
        created = await self._create(
            keys=[keys.job(spec.job_id), keys.ACTIVE_JOBS, keys.JOBS_BY_STATE], args=args
        )
        return bool(created)

    async def get(self, job_id: str) -> JobRecord | None:
        return JobRecord.parse(await self.r.hgetall(keys.job(job_id)))

    async def get_many(self, job_ids: list[str]) -> list[JobRecord | None]:
        pipe = self.r.pipeline(transaction=False)
        for job_id in job_ids:
            pipe.hgetall(keys.job(job_id))
        return [JobRecord.parse(raw) for raw in await pipe.execute()]

    async def finalize(self, result: JobResult, only_from: str = "") -> bool:
        """Like JobStore.finalize; `only_from="queued"` ends a job only if no stage has started."""
        return bool(
            await self._finalize(
                keys=[keys.job(result.job_id), keys.ACTIVE_JOBS, keys.JOBS_BY_STATE, keys.STATS],
                args=[
                    result.job_id,
                    result.state.value,
                    result.model_dump_json(),
                    self.ttl_s,
                    time.time(),
                    keys.DONE_CHANNEL,
                    only_from,
                ],
            )
        )

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
