"""Per handler, what a rollout of its sample suite costs on this machine: turns, tokens, stage times.

A local farm (private Redis, API, one Celery worker per stage, the scripted reference LLM at accuracy
0.5) runs every instance of each handler's shipped suite `--samples` times; the table gives medians
per rollout (and the mean reward, which the scripted policy's accuracy sets).

    python bench/suites.py [--samples 2 --handlers math,code,swe]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console
from rich.table import Table

from bench.common import parse_quick
from farm.embedded_redis import EmbeddedRedis
from farm.launcher import LocalFarm, WorkerSpec
from farm.models.results import JobResult

HANDLERS = Path(__file__).resolve().parents[1] / "handlers"


def _rows(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def math_suite(_: Path) -> list[dict[str, Any]]:
    return [
        {"handler": "math", "question": r["question"], "answer": r["answer"]}
        for r in _rows(HANDLERS / "math" / "problems.jsonl")
    ]


def code_suite(_: Path) -> list[dict[str, Any]]:
    return [
        {**{k: v for k, v in r.items() if k != "id"}, "handler": "code"}
        for r in _rows(HANDLERS / "code" / "problems.jsonl")
    ]


def swe_suite(scratch: Path) -> list[dict[str, Any]]:
    from handlers.swe.suite import build_repos

    return [{**instance, "handler": "swe"} for instance in build_repos(scratch / "swe-repos")]


SUITES: dict[str, Callable[[Path], list[dict[str, Any]]]] = {
    "math": math_suite,
    "code": code_suite,
    "swe": swe_suite,
}


def run_suite(api: str, instances: list[dict[str, Any]], samples: int) -> list[JobResult]:
    ids = []
    with httpx.Client(base_url=api, timeout=60) as http:
        for n, instance in enumerate(instances):
            for s in range(samples):
                job_id = f"bench-{instance['handler']}-{n}-{s}-{uuid.uuid4().hex[:6]}"
                body = {"instance": instance, "job_id": job_id, "wait": False}  # seeds derive from job ids
                http.post("/process", json=body).raise_for_status()
                ids.append(job_id)
        results: dict[str, JobResult] = {}
        while len(results) < len(ids):
            for job_id in ids:
                if job_id not in results:
                    result = JobResult.model_validate(http.get(f"/jobs/{job_id}").json())
                    if result.state.terminal:
                        results[job_id] = result
            time.sleep(0.2)
    return list(results.values())


def summarize(results: list[JobResult]) -> dict[str, float]:
    done = [r for r in results if r.state.value == "done"]
    traces = [t for r in done for t in r.trajectory.traces]

    def med(values: list[float]) -> float:
        return statistics.median(values) if values else 0.0

    return {
        "rollouts": len(results),
        "done": len(done),
        "reward": statistics.fmean(r.reward or 0.0 for r in done) if done else 0.0,
        "turns": med([float(t.metadata.get("turns") or 0) for t in traces]),
        "prompt": med([float(len(t.prompt_ids)) for t in traces]),
        "response": med([float(len(t.response_ids)) for t in traces]),
        "sampled": med([float(sum(t.loss_mask)) for t in traces]),
        "init": med([r.timings.init for r in done]),
        "run": med([r.timings.run for r in done]),
        "eval": med([r.timings.eval for r in done]),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--samples", type=int, default=2, help="rollouts per instance")
    parser.add_argument("--handlers", default="math,code,swe")
    parser.add_argument("--token-latency-ms", type=float, default=1.0)
    args = parse_quick(parser, samples=1, handlers="math")
    console = Console(width=120)
    scratch = Path(tempfile.mkdtemp(prefix="bench-handlers-"))
    server = EmbeddedRedis().start()
    farm = LocalFarm(
        redis_url=server.url,
        workers=[WorkerSpec("init", concurrency=4), WorkerSpec("run", concurrency=8), WorkerSpec("eval")],
        llm_servers=1,
        llm_args=["--accuracy", "0.5", "--seed", "11", "--token-latency-ms", str(args.token_latency_ms)],
        # the swe suite's repositories are built there: swe repo_paths must be inside an allowed root
        env={"FARM_WORKDIR": str(scratch / "work"), "FARM_HOST_FILE_ROOTS": str(scratch / "swe-repos")},
        log_dir=scratch / "logs",
    )
    rows: dict[str, dict[str, float]] = {}
    try:
        with farm:
            for name in args.handlers.split(","):
                instances = SUITES[name](scratch)
                started = time.monotonic()
                rows[name] = summarize(run_suite(farm.api_url, instances, args.samples))
                rows[name]["instances"] = len(instances)
                rows[name]["wall"] = time.monotonic() - started
                console.print(f"{name}: {rows[name]['rollouts']:.0f} rollouts in {rows[name]['wall']:.1f} s")
    finally:
        server.stop()

    table = Table(
        title=f"Sample suites, {args.samples} rollouts per instance, scripted policy (medians per rollout)"
    )
    columns = ("handler", "instances", "rollouts", "mean reward", "turns", "prompt tok", "response tok")
    columns += ("sampled tok", "init s", "run s", "eval s")
    for column in columns:
        table.add_column(column, justify="left" if column == "handler" else "right")
    for name, row in rows.items():
        table.add_row(
            name,
            f"{row['instances']:.0f}",
            f"{row['done']:.0f}/{row['rollouts']:.0f}",
            f"{row['reward']:.2f}",
            f"{row['turns']:.0f}",
            f"{row['prompt']:.0f}",
            f"{row['response']:.0f}",
            f"{row['sampled']:.0f}",
            f"{row['init']:.2f}",
            f"{row['run']:.2f}",
            f"{row['eval']:.2f}",
        )
    console.print(table)


if __name__ == "__main__":
    main()
