"""Time to collect K informative groups per step: the efficient DAPO consumer vs batch-by-batch.

Both strategies run on the same local farm (Redis, API, Celery workers, scripted reference LLM), read the
same prompt stream and give job i of prompt p the same sampling seed, so they draw the same rewards; only
the scheduling differs.
- batch-by-batch (baseline, seed 000 §3.4): request K prompts x n samples, wait for all of them, keep
  the informative groups, repeat until K are in; the surplus of the last batch is thrown away.
- efficient: `DapoConsumer` keeps `concurrency` jobs in flight, returns at K informative groups and
  carries unfinished jobs into the next step.

    python bench/dapo.py [--k 8 --n 4 --steps 3 --repeats 3 --run-slots 8 --latency-sigma 1.5]

Rollout latency has a long tail by default (the scripted server's `--latency-sigma`): most rollouts are
quick, a few take many times the mean, as agent rollouts do. `--latency-sigma 0` gives uniform latency.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from bench.common import parse_quick
from farm.client import DapoConfig, DapoConsumer, FarmClient
from farm.client.dapo import job_seed
from farm.client.groups import JobSpec, reward_spread, succeeded
from farm.client.polling import PollPolicy
from farm.embedded_redis import EmbeddedRedis
from farm.launcher import LocalFarm, WorkerSpec

PROBLEMS = Path(__file__).resolve().parents[1] / "handlers" / "math" / "problems.jsonl"
UNSOLVABLE = {"handler": "math", "question": "Name the largest known prime.", "answer": "none"}
POLL = PollPolicy(initial_s=0.01, maximum_s=0.1)
SAMPLING = {"max_tokens": 256}


def prompts(unsolvable_every: int) -> Iterator[dict[str, Any]]:
    """Scripted math problems with an always-wrong prompt every `unsolvable_every` (zero variance)."""
    rows = [json.loads(line) for line in PROBLEMS.read_text().splitlines() if line.strip()]
    for i, row in enumerate(itertools.cycle(rows)):
        if unsolvable_every and i % unsolvable_every == unsolvable_every - 1:
            yield UNSOLVABLE
        yield {"handler": "math", "question": row["question"], "answer": row["answer"]}


def batch_by_batch(
    url: str, k: int, n: int, steps: int, seed: int, unsolvable_every: int
) -> dict[str, float]:
    loader = prompts(unsolvable_every)
    prompt_index = 0
    jobs = 0
    started = time.monotonic()
    with FarmClient(url, poll=POLL) as farm:
        for step in range(steps):
            informative = 0
            while informative < k:
                ids: dict[int, list[str]] = {}
                for _ in range(k):
                    instance = next(loader)
                    for slot in range(n):
                        spec = JobSpec(f"bb{seed}-{step}-p{prompt_index}-s{slot}", "", slot, 0, instance, {})
                        spec.metadata["prompt_index"] = prompt_index
                        params = {**SAMPLING, "seed": job_seed(seed, spec)}
                        ids.setdefault(prompt_index, []).append(
                            farm.submit(instance, params, job_id=spec.job_id)
                        )
                    prompt_index += 1
                results = {r.job_id: r for r in farm.as_completed([j for g in ids.values() for j in g], 600)}
                jobs += sum(len(g) for g in ids.values())
                for group in ids.values():
                    done = [results[j] for j in group]
                    if all(succeeded(r) for r in done) and reward_spread([r.reward or 0.0 for r in done]) > 0:
                        informative += 1
    return {"wall_s": time.monotonic() - started, "jobs": jobs, "prompts": prompt_index}


def efficient(
    url: str, k: int, n: int, steps: int, seed: int, unsolvable_every: int, concurrency: int
) -> dict[str, float]:
    config = DapoConfig(
        n=n,
        concurrency=concurrency,
        seed=seed,
        sampling_params=SAMPLING,
        run_id=f"eff{seed}-{time.time_ns()}",
    )
    started = time.monotonic()
    with DapoConsumer(url, prompts(unsolvable_every), config, poll=POLL) as dapo:
        for step in range(steps):
            batch = dapo.next_batch(k, policy_version=step, timeout_s=600)
            assert len(batch.groups) == k
        wall = time.monotonic() - started
        counters = dapo.book.counters
        # carried jobs at the end would feed a next step; the bench counts only what was submitted
        return {"wall_s": wall, "jobs": counters.submitted, "prompts": counters.groups_opened}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--k", type=int, default=8, help="informative groups per step")
    parser.add_argument("--n", type=int, default=4, help="samples per prompt")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--run-slots", type=int, default=8, help="run-stage worker concurrency")
    parser.add_argument("--concurrency", type=int, default=0, help="consumer budget [2 x run slots]")
    parser.add_argument("--accuracy", type=float, default=0.5, help="scripted policy success chance")
    parser.add_argument(
        "--token-latency-ms", type=float, default=20.0, help="per sampled token: rollouts are LLM-bound"
    )
    parser.add_argument(
        "--latency-sigma",
        type=float,
        default=1.5,
        help="long tail of rollout latency (log-normal sigma, mean 1; 0 = no tail)",
    )
    parser.add_argument("--unsolvable-every", type=int, default=2)
    args = parse_quick(parser, k=2, n=2, steps=1, repeats=1)
    concurrency = args.concurrency or 2 * args.run_slots

    console = Console(width=110)
    logs = Path(tempfile.mkdtemp(prefix="bench-dapo-"))
    llm_args = [
        "--accuracy",
        str(args.accuracy),
        "--seed",
        "1",
        "--token-latency-ms",
        str(args.token_latency_ms),
        "--latency-sigma",
        str(args.latency_sigma),
    ]
    # a private redis-server: never the machine's Redis on 6379, whatever answers there
    private_redis = EmbeddedRedis().start()
    local = LocalFarm(
        redis_url=private_redis.url,
        workers=[WorkerSpec("init,eval", concurrency=4), WorkerSpec("run", concurrency=args.run_slots)],
        llm_servers=1,
        llm_args=llm_args,
        env={"FARM_WORKDIR": str(logs / "work")},
        log_dir=logs,
    )
    try:
        with local:
            console.print(f"farm up at {local.api_url} (logs: {logs}); warming up")
            batch_by_batch(local.api_url, 2, args.n, 1, 999, args.unsolvable_every)
            runs: dict[str, list[dict[str, float]]] = {"batch-by-batch": [], "efficient": []}
            for repeat in range(args.repeats):
                seed = 100 + repeat
                runs["batch-by-batch"].append(
                    batch_by_batch(local.api_url, args.k, args.n, args.steps, seed, args.unsolvable_every)
                )
                runs["efficient"].append(
                    efficient(
                        local.api_url, args.k, args.n, args.steps, seed, args.unsolvable_every, concurrency
                    )
                )
                console.print(f"repeat {repeat + 1}/{args.repeats} done")

    finally:
        private_redis.stop()

    base = statistics.median(r["wall_s"] for r in runs["batch-by-batch"])
    table = Table(
        title=f"DAPO: {args.steps} steps x K={args.k} informative groups, n={args.n}, "
        f"{args.run_slots} run slots, latency sigma {args.latency_sigma:g}, {args.repeats} repeats (medians)"
    )
    for column in ("strategy", "wall s", "s / step", "jobs submitted", "prompts opened", "speed-up"):
        table.add_column(column, justify="left" if column == "strategy" else "right")
    for name, results in runs.items():
        wall = statistics.median(r["wall_s"] for r in results)
        table.add_row(
            name,
            f"{wall:.2f}",
            f"{wall / args.steps:.2f}",
            f"{statistics.median(r['jobs'] for r in results):.0f}",
            f"{statistics.median(r['prompts'] for r in results):.0f}",
            f"{base / wall:.2f}x",
        )
    console.print(table)


if __name__ == "__main__":
    main()
