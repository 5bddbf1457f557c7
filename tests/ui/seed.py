"""Writes finished job records the way the farm stores them (hash + index entry), for paging tests: a
10,000-job farm without running 10,000 rollouts."""

from __future__ import annotations

import time

import redis

from farm import keys
from farm.jobs.spec import JobSpec
from farm.models.results import JobResult, JobState, StageError, Timings

HANDLERS = ("math", "code", "swe")


def seed_jobs(client: redis.Redis, n: int, prefix: str = "seed", start: float | None = None) -> list[str]:
    """n finished jobs, newest last; every 7th failed, rewards cycle 0/0.5/1, groups of 4."""
    start = time.time() - n * 0.001 if start is None else start
    ids = []
    pipe = client.pipeline(transaction=False)
    for i in range(n):
        job_id = f"{prefix}-{i:05d}"
        handler = HANDLERS[i % 3]
        failed = i % 7 == 0
        meta = {"group_id": f"{prefix}-g{i // 4}", "policy_version": i % 5}
        spec = JobSpec(
            job_id=job_id, handler=handler, instance={"handler": handler}, timeout_s=60, metadata=meta
        )
        result = JobResult(
            job_id=job_id,
            state=JobState.failed if failed else JobState.done,
            handler=handler,
            reward=None if failed else (i % 3) / 2,
            timings=Timings(queued=0.1, init=0.2, run=float(i % 10), eval=0.1),
            error=StageError(stage="run", type="sandbox_crash", message="boom") if failed else None,
            metadata=meta,
        )
        created = start + i * 0.001
        pipe.hset(
            keys.job(job_id),
            mapping={
                "spec": spec.model_dump_json(),
                "state": result.state.value,
                "task_ids": "{}",
                "created_at": created,
                "finished_at": created + 1,
                "t_queued": 0.1,
                "t_init": 0.2,
                "t_run": float(i % 10),
                "t_eval": 0.1,
                "result": result.model_dump_json(),
            },
        )
        pipe.zadd(keys.JOBS_INDEX, {job_id: created})
        ids.append(job_id)
        if len(pipe) >= 2000:
            pipe.execute()
    pipe.execute()
    return ids
