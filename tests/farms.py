"""Farms of real processes for tests: a LocalFarm whose logs and scratch folder are a fresh temporary
folder, and the session's Redis emptied for a farm that shares it."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import redis

from farm.launcher import LocalFarm, WorkerSpec

TOKENIZER_FARM_START_S = 240.0
"""Workers and the reference LLM each load the tokenizer (Llama 3's is 9 MB of JSON) before the farm
answers; under the load of a shared machine that takes minutes."""


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


@contextmanager
def tokenizer_farm(
    tokenizer: str,
    concurrency: int,
    *,
    llm_args: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
    llm_tokenizer: str | None = None,
) -> Iterator[tuple[httpx.Client, LocalFarm]]:
    """A started farm whose workers use `tokenizer` (a FARM_TOKENIZER value) and whose reference LLM
    (accuracy 1) uses `llm_tokenizer` (default the same): its API client, and the farm."""
    farm = LocalFarm(
        workers=[WorkerSpec("init,run,eval", concurrency=concurrency)],
        llm_args=["--tokenizer", llm_tokenizer or tokenizer, "--accuracy", "1.0", *llm_args],
        env={"FARM_TOKENIZER": tokenizer, **(env or {})},
    )
    with (
        farm.start(timeout_s=TOKENIZER_FARM_START_S),
        httpx.Client(base_url=farm.api_url, timeout=180) as api,
    ):
        yield api, farm
