"""Throughput of the staged pipeline: vs one worker doing init+run+eval, and with 1, 2, 3 nodes.

The workload (the `noop` handler's knobs) has the shape of an agent rollout: a slow init (a sandbox
start), an LLM-bound run (one call that the reference server answers after `--llm-ms`) and a slow
eval (a test run). Each configuration gets a fresh local farm (private Redis, API, Celery workers);
rollouts go through POST /process (wait=true) with `--inflight` outstanding at once.

1. Staged vs one worker, with the same number of pool processes: one worker consuming all three
   queues with a prefork pool of P processes (each process does one stage of one job at a time, so a
   process waits for the model as long as run lasts), vs the staged layout: init and eval on prefork
   pools, run on a thread pool of many slots, P processes in all. Init and eval compute (`busy`), as
   sandbox starts and test runs do. Seed 004 (SkyRL-Agent) reports 1.55x for its async pipeline.
2. Nodes: 1, 2 and 3 simulated nodes (worker sets with distinct FARM_NODE) in the staged layout. The
   nodes share this machine's cores, so init and eval sleep instead of computing here (each real node
   brings its own cores); the figure shows what the scheduling does with more nodes.

    python bench/scaling.py [--jobs 120 --inflight 64 --repeats 3 --init-s 0.1 --eval-s 0.1 --llm-ms 600]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console
from rich.table import Table

from bench.common import parse_quick
from farm.embedded_redis import EmbeddedRedis
from farm.launcher import LocalFarm, WorkerSpec

RUN_SLOTS = 16


def workload(args: argparse.Namespace, busy: bool) -> dict[str, Any]:
    return {
        "handler": "noop",
        "init_s": args.init_s,
        "eval_s": args.eval_s,
        "busy": busy,
        "generate_tokens": 16,
    }


async def _drive(api: str, instance: dict[str, Any], jobs: int, inflight: int) -> float:
    """Rollouts per second for `jobs` rollouts with `inflight` outstanding."""
    limit = asyncio.Semaphore(inflight)
    sampling = {"max_tokens": instance["generate_tokens"], "temperature": 1.0}

    async with httpx.AsyncClient(
        base_url=api, timeout=600, limits=httpx.Limits(max_connections=inflight)
    ) as http:

        async def one() -> None:
            async with limit:
                body = {"instance": instance, "sampling_params": sampling, "job_id": f"s-{uuid.uuid4().hex}"}
                answer = (await http.post("/process", json=body)).json()
                while answer.get("state") not in ("done", "failed", "cancelled", "timeout"):
                    await asyncio.sleep(0.05)
                    answer = (await http.get(f"/jobs/{body['job_id']}")).json()
                if answer["state"] != "done":
                    raise RuntimeError(f"rollout ended {answer['state']}: {answer.get('error')}")

        started = time.perf_counter()
        await asyncio.gather(*(one() for _ in range(jobs)))
        return jobs / (time.perf_counter() - started)


def measure(
    workers: list[WorkerSpec],
    instance: dict[str, Any],
    args: argparse.Namespace,
    console: Console,
    label: str,
) -> list[float]:
    logs = Path(tempfile.mkdtemp(prefix="bench-scaling-"))
    server = EmbeddedRedis().start()
    farm = LocalFarm(
        redis_url=server.url,
        workers=workers,
        llm_servers=1,
        llm_args=["--prefill-latency-ms", str(args.llm_ms)],
        env={"FARM_WORKDIR": str(logs / "work")},
        log_dir=logs,
    )
    rates = []
    try:
        with farm:
            asyncio.run(_drive(farm.api_url, instance, min(16, args.jobs), args.inflight))  # warm-up
            for _ in range(args.repeats):
                rates.append(asyncio.run(_drive(farm.api_url, instance, args.jobs, args.inflight)))
        console.print(f"{label}: {', '.join(f'{r:.1f}' for r in rates)} rollouts/s")
    finally:
        server.stop()
    return rates


def staged(node: str | None, init_procs: int, eval_procs: int) -> list[WorkerSpec]:
    return [
        WorkerSpec("init", pool="prefork", concurrency=init_procs, node=node),
        WorkerSpec("run", pool="threads", concurrency=RUN_SLOTS, node=node),
        WorkerSpec("eval", pool="prefork", concurrency=eval_procs, node=node),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=120)
    parser.add_argument("--inflight", type=int, default=64)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--init-s", type=float, default=0.1)
    parser.add_argument("--eval-s", type=float, default=0.1)
    parser.add_argument("--llm-ms", type=float, default=600.0, help="model latency of the run's LLM call")
    parser.add_argument("--processes", type=int, default=4, help="pool processes in part 1 (>= 3)")
    parser.add_argument("--only", choices=["staged", "nodes"], default=None)
    args = parse_quick(parser, jobs=24, repeats=1)
    console = Console(width=120)
    run_s = args.llm_ms / 1000
    console.print(
        f"workload: init {args.init_s:g} s, run ~{run_s:g} s (LLM), eval {args.eval_s:g} s; "
        f"{args.jobs} rollouts x {args.repeats} repeats, {args.inflight} in flight"
    )

    if args.only in (None, "staged"):
        procs = max(3, args.processes)
        init_procs = (procs - 1) // 2
        eval_procs = procs - 1 - init_procs
        one = measure(
            [WorkerSpec("init,run,eval", pool="prefork", concurrency=procs)],
            workload(args, busy=True),
            args,
            console,
            "one worker",
        )
        pipe = measure(
            staged(None, init_procs, eval_procs), workload(args, busy=True), args, console, "staged"
        )
        table = Table(
            title=f"Staged pipeline vs one worker doing init+run+eval ({procs} pool processes each)"
        )
        for column in ("layout", "processes", "rollouts/s (median)", "ratio"):
            table.add_column(column, justify="left" if column == "layout" else "right")
        base = statistics.median(one)
        table.add_row("one worker: init+run+eval, prefork", f"{procs}", f"{base:.2f}", "1.00x")
        layout = f"staged: init {init_procs} + run 1 ({RUN_SLOTS} threads) + eval {eval_procs}"
        table.add_row(
            layout, f"{procs}", f"{statistics.median(pipe):.2f}", f"{statistics.median(pipe) / base:.2f}x"
        )
        console.print(table)

    if args.only in (None, "nodes"):
        table = Table(title="Rollouts/s with 1, 2, 3 simulated nodes (staged layout per node)")
        for column in ("nodes", "workers", "rollouts/s (median)", "vs 1 node"):
            table.add_column(column, justify="right")
        base = 0.0
        for count in (1, 2, 3):
            workers = [w for n in range(count) for w in staged(f"node{n}", 1, 1)]
            rate = statistics.median(
                measure(workers, workload(args, busy=False), args, console, f"{count} node(s)")
            )
            base = base or rate
            table.add_row(str(count), str(len(workers)), f"{rate:.2f}", f"{rate / base:.2f}x")
        console.print(table)


if __name__ == "__main__":
    main()
