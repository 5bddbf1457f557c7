"""Resident memory of the farm's own processes against the work they did and the cores they see.

    python -m bench.memory [--rollouts 10000] [--checkpoints 1000,3000,10000] [--cores 2,16]

Starts a farm (private Redis, the API, one worker per stage; noop rollouts, no model) once per entry of
`--cores`, submits rollouts in batches and, at each checkpoint once the farm has drained them, prints the
RSS of the API and of each worker. Per core count, the farm runs with the settings that follow the core
count on such a machine: glibc gives a process up to 8 malloc arenas per online core (what a 16-core node
does, emulated here on any machine through MALLOC_ARENA_MAX) and Celery's default concurrency is the
core count; the farm's own setting (FARM_MALLOC_ARENA_MAX, default 2: farm/memory.py) is applied unless
`--uncapped`. Processes are also pinned to at most that many cores where the machine has them
(sched_setaffinity). The issue's bound: the API under 200 MB and a worker under 250 MB at 10,000 queued,
whatever the core count.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import psutil

from farm.launcher import LocalFarm, WorkerSpec

API_LIMIT_MB, WORKER_LIMIT_MB = 200, 250
ARENAS_PER_CORE = 8
"""glibc's default arena cap on 64-bit: 8 x online cores."""


def rss_mb(pid: int) -> float:
    return psutil.Process(pid).memory_info().rss / 1e6


def submit(api: str, count: int, threads: int = 8) -> None:
    body = {"instance": {"handler": "noop"}, "wait": False}

    def post_many(n: int) -> None:
        with httpx.Client(base_url=api, timeout=60) as http:
            for _ in range(n):
                http.post("/process", json=body).raise_for_status()

    shares = [count // threads + (1 if i < count % threads else 0) for i in range(threads)]
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(post_many, shares))


def drained(api: str, total: int, timeout_s: float) -> float:
    """Seconds until `total` jobs are done (or the timeout)."""
    started = time.monotonic()
    with httpx.Client(base_url=api, timeout=30) as http:
        while time.monotonic() - started < timeout_s:
            if http.get("/status").json()["jobs"].get("done", 0) >= total:
                break
            time.sleep(0.5)
    return time.monotonic() - started


def measure(cores: int, checkpoints: list[int], uncapped: bool) -> list[dict[str, float]]:
    logs = Path(tempfile.mkdtemp(prefix="bench-memory-"))
    env = {"FARM_WORKDIR": str(logs / "work"), "FARM_API_TOKEN": ""}
    if uncapped:
        env["FARM_MALLOC_ARENA_MAX"] = str(ARENAS_PER_CORE * cores)
        env["MALLOC_ARENA_MAX"] = str(ARENAS_PER_CORE * cores)
    available = sorted(os.sched_getaffinity(0))
    before = set(available)
    os.sched_setaffinity(0, available[:cores])  # children inherit it
    workers = [WorkerSpec(q, concurrency=min(cores, 64)) for q in ("init", "run", "eval")]
    farm = LocalFarm(workers=workers, llm_policy=None, env=env, log_dir=logs)
    rows: list[dict[str, float]] = []
    try:
        with farm:
            os.sched_setaffinity(0, before)
            children = dict(farm.children())
            done = 0
            for checkpoint in checkpoints:
                submit(farm.api_url, checkpoint - done)
                done = checkpoint
                took = drained(farm.api_url, done, timeout_s=600)
                row = {"cores": cores, "rollouts": done, "drain_s": round(took, 1)}
                row["api_mb"] = round(rss_mb(children["api"].pid), 1)
                for name, proc in children.items():
                    if name.startswith("worker-"):
                        row[f"{name}_mb"] = round(rss_mb(proc.pid), 1)
                rows.append(row)
                print(row, flush=True)
    finally:
        os.sched_setaffinity(0, before)
        shutil.rmtree(logs, ignore_errors=True)  # the farm's logs and scratch: nothing kept
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkpoints", default="1000,3000,10000")
    parser.add_argument("--cores", default="2,16", help="core counts to emulate (arenas, concurrency)")
    parser.add_argument("--uncapped", action="store_true", help="glibc's arena default, not the farm's cap")
    args = parser.parse_args(argv)
    checkpoints = [int(c) for c in args.checkpoints.split(",")]
    worst = {"api": 0.0, "worker": 0.0}
    for cores in (int(c) for c in args.cores.split(",")):
        for row in measure(cores, checkpoints, args.uncapped):
            worst["api"] = max(worst["api"], row["api_mb"])
            worst["worker"] = max([worst["worker"], *(v for k, v in row.items() if k.startswith("worker-"))])
    verdict = worst["api"] < API_LIMIT_MB and worst["worker"] < WORKER_LIMIT_MB
    print(
        f"max RSS: API {worst['api']:.0f} MB (< {API_LIMIT_MB}), worker {worst['worker']:.0f} MB "
        f"(< {WORKER_LIMIT_MB}): {'within' if verdict else 'OVER'} the bounds"
    )


if __name__ == "__main__":
    main()
