"""A step's time when 1 rollout in 20 hangs: groups with a deadline vs waiting for every sample.

Each step is synchronous GRPO: K prompts, n samples each, all K x n jobs in flight at once (a DAPO consumer
over exactly those K prompts), and the step ends when its K groups are delivered. Every rollout makes one
generation through the scripted reference LLM with a long-tailed latency (`--latency-sigma`, log-normal,
mean 1), then ends; one rollout in `--hang-every` (drawn per rollout, seeded) instead hangs in its run
stage, as a rollout whose agent never returns does.
Three ways to end a step, on the same farm and the same seeded hangs:
- wait for all: a group is complete when all n samples have ended; a hung one ends only at the job budget
  (`--job-timeout-s`, the farm's backstop), scored 0 (FailurePolicy.zero);
- deadline: `group_deadline_s` — a group is delivered with the samples it has when its deadline passes,
  its straggler cancelled;
- min usable: `min_usable = n - 1` (and the same deadline as a bound) — delivered as soon as n - 1
  samples are in.

    python -m bench.group_deadlines [--k 4 --n 4 --steps 6 --hang-every 20 --deadline-s 5 --job-timeout-s 20]

Quote the medians with the machine's load (`uptime`): the farm shares the cores with the bench.
"""

from __future__ import annotations

import argparse
import itertools
import os
import random
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from bench.common import parse_quick
from farm.client import DapoConfig, DapoConsumer, FailurePolicy
from farm.client.polling import PollPolicy
from farm.embedded_redis import EmbeddedRedis
from farm.launcher import LocalFarm, WorkerSpec
from farm.models import JobState

POLL = PollPolicy(initial_s=0.01, maximum_s=0.1)


def prompts(n: int, hang_every: int, seed: int, tokens: int) -> Iterator[dict[str, Any]]:
    """noop rollouts that generate `tokens` through the reference LLM; each sample hangs with chance
    1/hang_every (the hanging samples of a prompt named in `only_samples`, which hang in run)."""
    rng = random.Random(seed)
    while True:
        hanging = [slot for slot in range(n) if rng.random() < 1 / hang_every]
        instance: dict[str, Any] = {"handler": "noop", "generate_tokens": tokens}
        if hanging:
            instance |= {"run_s": 3600, "only_samples": hanging}
        yield instance


def run(url: str, args: argparse.Namespace, mode: str, seed: int) -> dict[str, Any]:
    extra: dict[str, Any] = {}
    if mode == "deadline":
        extra = {"group_deadline_s": args.deadline_s}
    elif mode == "min usable":
        extra = {"group_deadline_s": args.deadline_s, "min_usable": args.n - 1}
    config = DapoConfig(
        n=args.n,
        concurrency=args.k * args.n,
        filter_zero_variance=False,
        failure_policy=FailurePolicy.zero,
        job_timeout_s=args.job_timeout_s,
        carry_over=False,
        max_staleness=None,
        report_offpolicy=False,
        run_id=f"gd{seed}-{mode.replace(' ', '')}-{time.time_ns()}",
        **extra,
    )
    steps: list[float] = []
    samples = cut = 0
    stream = prompts(args.n, args.hang_every, seed, args.tokens)
    for step in range(args.steps):
        # a consumer per step over exactly its K prompts: the step ends when those K groups are delivered
        config = config.model_copy(update={"run_id": f"{config.run_id}-s{step}"})
        with DapoConsumer(url, itertools.islice(stream, args.k), config, poll=POLL) as dapo:
            started = time.monotonic()
            batch = dapo.next_batch(args.k, policy_version=step, timeout_s=args.job_timeout_s * 4)
            steps.append(time.monotonic() - started)
        samples += sum(1 for g in batch.groups for r in g.results if r.state is JobState.done)
        cut += sum(len(g.stragglers) for g in batch.groups)
        cut += sum(1 for g in batch.groups for r in g.results if r.state is not JobState.done)
    return {"steps": steps, "samples": samples, "cut": cut}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--k", type=int, default=4, help="groups per step")
    parser.add_argument("--n", type=int, default=4, help="samples per group")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=1)
    parser.add_argument("--hang-every", type=int, default=20, help="one rollout in this many hangs")
    parser.add_argument("--deadline-s", type=float, default=5.0, help="group deadline")
    parser.add_argument("--job-timeout-s", type=float, default=20.0, help="the job budget (backstop)")
    parser.add_argument("--tokens", type=int, default=48, help="tokens generated per rollout")
    parser.add_argument("--token-latency-ms", type=float, default=20.0)
    parser.add_argument("--latency-sigma", type=float, default=1.0, help="long tail (log-normal sigma)")
    args = parse_quick(parser, k=2, n=4, steps=2, repeats=1, job_timeout_s=8.0, deadline_s=3.0)

    console = Console(width=120)
    logs = Path(tempfile.mkdtemp(prefix="bench-group-deadlines-"))
    llm_args = ["--seed", "1", "--token-latency-ms", str(args.token_latency_ms)]
    llm_args += ["--latency-sigma", str(args.latency_sigma)]
    private_redis = EmbeddedRedis().start()  # never the machine's Redis on 6379
    local = LocalFarm(
        redis_url=private_redis.url,
        workers=[WorkerSpec("init,eval", concurrency=8), WorkerSpec("run", concurrency=args.k * args.n + 4)],
        llm_servers=1,
        llm_args=llm_args,
        env={"FARM_WORKDIR": str(logs / "work")},
        log_dir=logs,
    )
    modes = ("wait for all", "deadline", "min usable")
    runs: dict[str, list[dict[str, Any]]] = {mode: [] for mode in modes}
    try:
        with local:
            console.print(f"farm up at {local.api_url} (logs: {logs}); load {os.getloadavg()[0]:.1f}")
            for repeat in range(args.repeats):
                for mode in modes:
                    runs[mode].append(run(local.api_url, args, mode, seed=100 + repeat))
                    console.print(f"repeat {repeat + 1}/{args.repeats}: {mode} done")
    finally:
        private_redis.stop()

    base = statistics.mean(s for r in runs["wait for all"] for s in r["steps"])
    table = Table(
        title=f"Step time, K={args.k} groups x n={args.n}, 1 rollout in {args.hang_every} hangs, deadline "
        f"{args.deadline_s:g} s, job budget {args.job_timeout_s:g} s, latency sigma {args.latency_sigma:g}, "
        f"{args.steps} steps x {args.repeats} repeats; load {os.getloadavg()[0]:.1f}"
    )
    for column in (
        "ending a group",
        "median step s",
        "mean step s",
        "max step s",
        "samples used",
        "timed out / cut",
        "mean vs wait",
    ):
        table.add_column(column, justify="left" if column == "ending a group" else "right")
    for mode, results in runs.items():
        steps = [s for r in results for s in r["steps"]]
        mean = statistics.mean(steps)
        table.add_row(
            mode,
            f"{statistics.median(steps):.2f}",
            f"{mean:.2f}",
            f"{max(steps):.2f}",
            str(sum(r["samples"] for r in results)),
            str(sum(r["cut"] for r in results)),
            f"{base / mean:.2f}x",
        )
    console.print(table)


if __name__ == "__main__":
    main()
