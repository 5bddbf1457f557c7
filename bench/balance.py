"""Heterogeneous backends: the pool's sticky least-assigned choice vs a static equal split.

Three reference LLM servers, one `--slow-factor` times slower per token. The same burst of math jobs
runs twice per repeat on the same farm:
- least-assigned (the farm's pool): each job is pinned, when it first calls the policy, to the backend
  with the fewest jobs currently pinned, so the slow one ends up with fewer;
- static equal split (baseline): job i is pinned to backend i mod 3 before it is submitted, written
  into the pool's own pin map (`keys.sticky(<job id>)`), as a trainer that splits work evenly would.
The figure is the burst's completion time (submit of the first job to the last result).

    python bench/balance.py [--jobs 48 --repeats 3 --run-slots 12 --slow-factor 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import redis
from rich.console import Console
from rich.table import Table

from bench.common import parse_quick, wait_answering
from farm import keys
from farm.children import spawn
from farm.client import FarmClient
from farm.client.polling import PollPolicy
from farm.embedded_redis import EmbeddedRedis, free_port
from farm.launcher import LocalFarm, WorkerSpec

PROBLEMS = Path(__file__).resolve().parents[1] / "handlers" / "math" / "problems.jsonl"
POLL = PollPolicy(initial_s=0.01, maximum_s=0.1)


def start_llm(token_latency_ms: float, log: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    argv = [sys.executable, "-m", "farm.cli", "llm", "serve", "--policy", "scripted", "--port", str(port)]
    argv += ["--token-latency-ms", str(token_latency_ms), "--accuracy", "0.5", "--seed", "2"]
    proc = spawn(argv, stdout=log.open("ab"), stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        wait_answering(f"{url}/models", 60, what="the slow LLM server to answer", request_s=1)
    except TimeoutError:
        proc.kill()
        raise
    return proc, url


def burst(
    farm: FarmClient, r: redis.Redis, tag: str, jobs: int, static: list[str] | None
) -> dict[str, object]:
    rows = [json.loads(line) for line in PROBLEMS.read_text().splitlines() if line.strip()]
    ids = [f"bal-{tag}-{i}" for i in range(jobs)]
    if static is not None:
        generations = {a: json.loads(r.hget(keys.BACKENDS, a))["gen"] for a in static}  # type: ignore[arg-type]
        for i, job_id in enumerate(ids):
            address = static[i % len(static)]
            r.set(keys.sticky(job_id), f"{address}|{generations[address]}", ex=3600)
    started = time.monotonic()
    for i, job_id in enumerate(ids):
        row = rows[i % len(rows)]
        instance = {"handler": "math", "question": row["question"], "answer": row["answer"]}
        farm.submit(instance, {"max_tokens": 256, "seed": i}, job_id=job_id)
    results = list(farm.as_completed(ids, timeout_s=900))
    wall = time.monotonic() - started
    used = Counter(
        str((t.metadata.get("backends") or ["?"])[0]) for res in results for t in res.trajectory.traces[:1]
    )
    return {"wall_s": wall, "done": sum(res.state.value == "done" for res in results), "backends": used}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--jobs", type=int, default=48)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--run-slots", type=int, default=12)
    parser.add_argument("--token-latency-ms", type=float, default=20.0)
    parser.add_argument("--slow-factor", type=float, default=3.0)
    args = parse_quick(parser, jobs=12, repeats=1)

    console = Console(width=110)
    logs = Path(tempfile.mkdtemp(prefix="bench-balance-"))
    # a private redis-server: never the machine's Redis on 6379, whatever answers there
    private_redis = EmbeddedRedis().start()
    local = LocalFarm(
        redis_url=private_redis.url,
        workers=[WorkerSpec("init,eval", concurrency=6), WorkerSpec("run", concurrency=args.run_slots)],
        llm_servers=2,
        llm_args=["--accuracy", "0.5", "--seed", "2", "--token-latency-ms", str(args.token_latency_ms)],
        env={"FARM_WORKDIR": str(logs / "work")},
        log_dir=logs,
    )
    slow_latency = args.token_latency_ms * args.slow_factor
    slow_proc, slow_url = start_llm(slow_latency, logs / "llm-slow.log")
    try:
        with local, FarmClient(local.api_url, poll=POLL) as farm:
            farm.add_llm_server(slow_url)
            backends = [b.address for b in farm.llm_servers()]
            console.print(f"farm up at {local.api_url}; backends {backends} (slow: {slow_url}); logs {logs}")
            r = redis.Redis.from_url(local.redis_url, decode_responses=True)
            burst(farm, r, "warm", 2 * args.run_slots, None)
            runs: dict[str, list[dict[str, object]]] = {"static equal split": [], "least-assigned sticky": []}
            for repeat in range(args.repeats):
                runs["static equal split"].append(burst(farm, r, f"s{repeat}", args.jobs, backends))
                runs["least-assigned sticky"].append(burst(farm, r, f"l{repeat}", args.jobs, None))
                console.print(f"repeat {repeat + 1}/{args.repeats} done")
    finally:
        slow_proc.terminate()
        slow_proc.wait(10)
        private_redis.stop()

    base = statistics.median(float(x["wall_s"]) for x in runs["static equal split"])  # type: ignore[arg-type]
    table = Table(
        title=f"{args.jobs} math jobs, {args.run_slots} run slots, 3 backends (one {args.slow_factor:g}x "
        f"slower), {args.repeats} repeats (medians)"
    )
    for column in ("assignment", "completion s", "jobs on slow backend", "speed-up"):
        table.add_column(column, justify="left" if column == "assignment" else "right")
    for name, results in runs.items():
        wall = statistics.median(float(x["wall_s"]) for x in results)  # type: ignore[arg-type]
        on_slow = statistics.median(x["backends"].get(slow_url, 0) for x in results)  # type: ignore[attr-defined]
        table.add_row(name, f"{wall:.2f}", f"{on_slow:.0f}", f"{base / wall:.2f}x")
    console.print(table)


if __name__ == "__main__":
    main()
