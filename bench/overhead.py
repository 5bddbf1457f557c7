"""Farm overhead: a no-op rollout through REST + Celery chain vs a bare Celery chain of three no-op
tasks on the same worker processes vs the handler called in-process.

    python -m bench.overhead [--n 300] [--burst 1000] [--inflight 64] [--repeats 3]   (extra: bench)

Prints p50/p99 sequential latency, sustained rollouts/s with 64 in flight and the p99 latency then
(the farm's answer to each POST /process; a bare chain's time to its result key), each the median over
--repeats runs, with the farm/bare ratios the issue's targets are stated in (the median of the
per-run ratios: each run measures both back to back, so the machine's slower spells cancel out),
and the CPU each rollout costs in all processes together (Redis, API, workers and the load client)
while 64 are in flight.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import aiohttp
import psutil
from rich.console import Console
from rich.table import Table

from bench.common import parse_quick, pct
from farm.embedded_redis import EmbeddedRedis
from farm.handler.registry import get_handler
from farm.handler.standalone import job_context
from farm.jobs.spec import JobSpec
from farm.launcher import LocalFarm, WorkerSpec

NOOP = {"handler": "noop"}


def in_process_latencies(n: int) -> list[float]:
    handler = get_handler("noop")
    out = []
    for i in range(n):
        t0 = time.perf_counter()
        spec = JobSpec(job_id=f"local-{i}", handler="noop", instance=NOOP, timeout_s=60)
        ctx = job_context(spec, handler.validate(NOOP), node="local", workdir=Path("/tmp"))
        state = handler.init(ctx)
        run = handler.run(ctx, state)
        handler.final_result(ctx, run, handler.eval(ctx, state, run))
        out.append(time.perf_counter() - t0)
    return out


def cpu_seconds() -> float:
    """CPU time used so far by this process and every process it started (the farm, its Redis)."""
    me = psutil.Process()
    total = 0.0
    for process in [me, *me.children(recursive=True)]:
        with contextlib.suppress(psutil.Error):
            times = process.cpu_times()
            total += times.user + times.system + times.children_user + times.children_system
    return total


def per_rollout_cpu_ms(
    throughput: Callable[[], tuple[float, list[float]]], total: int
) -> tuple[float, list[float], float]:
    """(rollouts/s, latencies, CPU ms per rollout in all processes) of one throughput run."""
    before = cpu_seconds()
    rate, latencies = throughput()
    return rate, latencies, (cpu_seconds() - before) / total * 1000


def bare_chain():
    from celery import chain

    from bench.overhead_app import bare_eval, bare_init, bare_run

    return chain(
        bare_init.si().set(queue="init"), bare_run.si().set(queue="run"), bare_eval.si().set(queue="eval")
    )


def bare_latencies(n: int) -> list[float]:
    out = []
    for _ in range(n):
        t0 = time.perf_counter()
        bare_chain().apply_async().get(timeout=30)
        out.append(time.perf_counter() - t0)
    return out


def bare_throughput(total: int, inflight: int, redis_url: str) -> tuple[float, list[float]]:
    """64 chains in flight, completion read straight from the result keys (MGET every millisecond):
    Celery's own AsyncResult.get() from many threads can miss its pub/sub wake-up and hang. Returns
    rollouts/s and each chain's time from its send to its result seen."""
    import redis

    client = redis.Redis.from_url(redis_url)
    outstanding: dict[str, float] = {}
    latencies: list[float] = []
    sent = 0
    t0 = time.perf_counter()
    while len(latencies) < total:
        while sent < total and len(outstanding) < inflight:
            outstanding[bare_chain().apply_async().id] = time.perf_counter()
            sent += 1
        ids = list(outstanding)
        states = client.mget([f"celery-task-meta-{task_id}" for task_id in ids])
        now = time.perf_counter()
        for task_id, state in zip(ids, states, strict=True):
            if state is not None:
                latencies.append(now - outstanding.pop(task_id))
        time.sleep(0.001)
    return total / (time.perf_counter() - t0), latencies


# The farm is driven over HTTP with aiohttp: httpx costs several milliseconds of client CPU per
# request, which on two shared cores comes straight out of the farm's share (the bare chain's
# client publishes to Redis directly and pays nothing like it).


def farm_latencies(api: str, n: int) -> list[float]:
    async def run() -> list[float]:
        out = []
        async with aiohttp.ClientSession(api) as http:
            for _ in range(n):
                t0 = time.perf_counter()
                async with http.post("/process", json={"instance": NOOP}) as response:
                    body = await response.json()
                out.append(time.perf_counter() - t0)
                assert body["state"] == "done", body
        return out

    return asyncio.run(run())


def farm_throughput(api: str, total: int, inflight: int) -> tuple[float, list[float]]:
    """Rollouts/s with `inflight` POST /process in flight, and each call's latency."""
    latencies: list[float] = []

    async def run() -> float:
        async with aiohttp.ClientSession(api, connector=aiohttp.TCPConnector(limit=inflight)) as http:
            gate = asyncio.Semaphore(inflight)

            async def one() -> None:
                body = {"instance": NOOP, "job_id": uuid.uuid4().hex}
                async with gate:
                    started = time.perf_counter()
                    for attempt in range(3):  # a dropped connection: the same job id waits for the same job
                        try:
                            async with http.post("/process", json=body) as response:
                                answer = await response.json()
                            break
                        except aiohttp.ClientConnectionError:
                            if attempt == 2:
                                raise
                    latencies.append(time.perf_counter() - started)
                    assert answer["state"] == "done", answer

            t0 = time.perf_counter()
            await asyncio.gather(*(one() for _ in range(total)))
            return total / (time.perf_counter() - t0)

    return asyncio.run(run()), latencies


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=300, help="sequential requests per latency run")
    parser.add_argument("--burst", type=int, default=1000, help="rollouts per throughput run")
    parser.add_argument("--inflight", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--pool", default="threads", help="worker pool for all three workers")
    parser.add_argument("--concurrency", type=int, default=4, help="per worker")
    args = parse_quick(parser, n=30, burst=100, repeats=1)
    console = Console()

    rows: dict[str, list[float]] = {}
    with EmbeddedRedis() as redis_server:
        import os

        os.environ["FARM_REDIS_URL"] = redis_server.url
        from farm.settings import get_settings

        get_settings.cache_clear()
        workers = [
            WorkerSpec(q, pool=args.pool, concurrency=args.concurrency, app="bench.overhead_app")
            for q in ("init", "run", "eval")
        ]
        with LocalFarm(redis_url=redis_server.url, workers=workers, llm_policy=None) as farm:
            farm_latencies(farm.api_url, 50)  # warm up connections and imports
            bare_latencies(50)
            for r in range(args.repeats):
                console.print(f"run {r + 1}/{args.repeats}")
                local = in_process_latencies(args.n)
                bare = bare_latencies(args.n)
                ours = farm_latencies(farm.api_url, args.n)
                for name, values in (("local", local), ("bare", bare), ("farm", ours)):
                    rows.setdefault(f"{name}_p50", []).append(pct(values, 0.5) * 1000)
                    rows.setdefault(f"{name}_p99", []).append(pct(values, 0.99) * 1000)
                for name, run_burst in (
                    ("bare", lambda: bare_throughput(args.burst, args.inflight, redis_server.url)),
                    ("farm", lambda: farm_throughput(farm.api_url, args.burst, args.inflight)),
                ):
                    rate, latencies, cpu = per_rollout_cpu_ms(run_burst, args.burst)
                    rows.setdefault(f"{name}_tput", []).append(rate)
                    rows.setdefault(f"{name}_loaded_p99", []).append(pct(latencies, 0.99) * 1000)
                    rows.setdefault(f"{name}_cpu", []).append(cpu)
                # Paired ratios: both sides of a pair ran back to back, so a slower or faster spell
                # of the machine cancels out; the table gives the median of the pairs.
                for metric in ("p50", "p99", "tput", "loaded_p99", "cpu"):
                    rows.setdefault(f"ratio_{metric}", []).append(
                        rows[f"farm_{metric}"][-1] / rows[f"bare_{metric}"][-1]
                    )

    m = {k: statistics.median(v) for k, v in rows.items()}
    table = Table(
        title=f"no-op rollout overhead (medians of {args.repeats} runs; {args.pool} pool "
        f"c{args.concurrency}, 3 workers, 2 cores)"
    )
    for col in ("metric", "farm (REST + chain)", "bare Celery chain", "handler in-process", "farm / bare"):
        table.add_column(col, justify="right")
    table.add_row(
        "latency p50 ms",
        f"{m['farm_p50']:.1f}",
        f"{m['bare_p50']:.1f}",
        f"{m['local_p50']:.3f}",
        f"{m['ratio_p50']:.2f}x",
    )
    table.add_row(
        "latency p99 ms",
        f"{m['farm_p99']:.1f}",
        f"{m['bare_p99']:.1f}",
        f"{m['local_p99']:.3f}",
        f"{m['ratio_p99']:.2f}x",
    )
    table.add_row(
        f"rollouts/s at {args.inflight} in flight",
        f"{m['farm_tput']:.0f}",
        f"{m['bare_tput']:.0f}",
        "-",
        f"{m['ratio_tput']:.2f}x",
    )
    table.add_row(
        f"latency p99 at {args.inflight} in flight, ms",
        f"{m['farm_loaded_p99']:.0f}",
        f"{m['bare_loaded_p99']:.0f}",
        "-",
        f"{m['ratio_loaded_p99']:.2f}x",
    )
    table.add_row(
        "CPU ms per rollout (all processes)",
        f"{m['farm_cpu']:.2f}",
        f"{m['bare_cpu']:.2f}",
        "-",
        f"{m['ratio_cpu']:.2f}x",
    )
    console.print(table)
    console.print("targets: farm p50 <= 25 ms and <= 1.5x bare; sustained >= 100/s and >= 0.7x bare")


if __name__ == "__main__":
    main()
