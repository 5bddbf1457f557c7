"""Farms of real processes for tests: a LocalFarm whose logs and scratch folder are a fresh temporary
folder, and the session's Redis emptied for a farm that shares it."""

from __future__ import annotations

import tempfile
from pathlib import Path

import redis

from farm.launcher import LocalFarm, WorkerSpec


def stage_workers(init: int, run: int, eval_: int = 4) -> list[WorkerSpec]:
    """One worker per stage queue (init, run, eval) with these concurrencies."""
    return [
        WorkerSpec("init", concurrency=init),
        WorkerSpec("run", concurrency=run),
        WorkerSpec("eval", concurrency=eval_),
    ]


def temp_farm(
    prefix: str,
    *,
    workers: list[WorkerSpec],
    redis_url: str | None = None,
    llm_policy: str | None = "scripted",
    llm_servers: int = 1,
    llm_args: list[str] | None = None,
    env: dict[str, str] | None = None,
) -> LocalFarm:
    """A LocalFarm, not started yet, whose logs are a new temporary folder named `prefix…` (its
    `log_dir`) and whose FARM_WORKDIR is `work` inside it (its `scratch_dir`); `env` adds to or
    overrides that. No `redis_url`: the farm starts and stops a private redis-server of its own."""
    logs = Path(tempfile.mkdtemp(prefix=prefix))
    return LocalFarm(
        redis_url=redis_url,
        workers=workers,
        llm_policy=llm_policy,
        llm_servers=llm_servers,
        llm_args=llm_args or [],
        env={"FARM_WORKDIR": str(logs / "work"), **(env or {})},
        log_dir=logs,
    )


def emulating_farm(
    kind: str, workers: list[WorkerSpec], llm_policy: str = "scripted", llm_args: tuple[str, ...] = ()
) -> LocalFarm:
    """A `temp_farm` whose one reference LLM speaks as `kind` (vllm, sglang) does: its routes, its order."""
    return temp_farm(
        f"farm-{kind}-", workers=workers, llm_policy=llm_policy, llm_args=["--emulate", kind, *llm_args]
    )


def emptied(redis_url: str) -> str:
    """`redis_url`, its database flushed first: what other suites left on the session's Redis (backends,
    jobs) is not the next farm's."""
    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    client.close()
    return redis_url
