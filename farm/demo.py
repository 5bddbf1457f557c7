"""`farm demo`: a local farm, a batch of math tasks through the task API, a live progress bar, a
summary table, and the trajectories as JSONL."""

from __future__ import annotations

import json
import statistics
import time
from importlib.resources import files
from pathlib import Path
from typing import Any

import httpx
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from farm.launcher import LocalFarm, default_workers, stop_signals_as_keyboard_interrupt
from farm.models.results import JobResult
from farm.settings import get_settings


def math_problems() -> list[dict[str, Any]]:
    text = files("handlers.math").joinpath("problems.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def summarise(results: list[JobResult], wall_s: float) -> Table:
    table = Table(title=f"{len(results)} rollouts in {wall_s:.1f} s")
    table.add_column("metric")
    table.add_column("value", justify="right")
    states: dict[str, int] = {}
    for r in results:
        states[r.state.value] = states.get(r.state.value, 0) + 1
    rewards = [r.reward for r in results if r.reward is not None]
    table.add_row("rollouts/s", f"{len(results) / wall_s:.2f}")
    table.add_row("states", ", ".join(f"{k} {v}" for k, v in sorted(states.items())))
    table.add_row("mean reward", f"{statistics.fmean(rewards):.3f}" if rewards else "-")
    groups: dict[str, list[float]] = {}
    for r in results:
        if r.reward is not None:
            groups.setdefault(str(r.metadata.get("group_id")), []).append(r.reward)
    informative = sum(1 for g in groups.values() if len(set(g)) > 1)
    table.add_row("groups with reward variance", f"{informative} / {len(groups)}")
    sampled = [sum(sum(t.loss_mask) for t in r.trajectory.traces) for r in results]
    table.add_row("sampled tokens (mean)", f"{statistics.fmean(sampled):.0f}" if sampled else "-")
    for stage in ("queued", "init", "run", "eval"):
        values = [getattr(r.timings, stage) * 1000 for r in results]
        table.add_row(
            f"{stage} p50 / p95 ms", f"{percentile(values, 0.5):.0f} / {percentile(values, 0.95):.0f}"
        )
    return table


def run_demo(n_tasks: int, samples: int, out: Path, llm_args: list[str], run_concurrency: int) -> None:
    console = Console()
    problems = math_problems()[:n_tasks]
    settings = get_settings()
    farm = LocalFarm(
        redis_url=settings.redis_url,
        workers=default_workers(run_concurrency),
        llm_args=llm_args,
        supervise=True,
    )
    with stop_signals_as_keyboard_interrupt():
        try:
            with console.status("starting Redis, API, workers and the reference LLM…"):
                farm.start()
            console.print(f"farm up at {farm.api_url}, Redis {farm.redis_url}")
            results, wall = _run_batch(console, farm.api_url, problems, samples)
        except KeyboardInterrupt:
            console.print("interrupted; stopping the farm")
            return
        finally:
            farm.stop()
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w") as fh:
        for result in results:
            fh.write(result.model_dump_json() + "\n")
    console.print(summarise(results, wall))
    console.print(f"trajectories: {out}")


def _run_batch(
    console: Console, api: str, problems: list[dict[str, Any]], samples: int
) -> tuple[list[JobResult], float]:
    stamp = time.strftime("%Y%m%d%H%M%S")
    total = len(problems) * samples
    started = time.monotonic()
    with httpx.Client(base_url=api, timeout=30) as http:
        pending: dict[str, None] = {}
        for problem in problems:
            task_id = f"demo-{stamp}-{problem['id']}"
            body = {
                "task_id": task_id,
                "instance": {"handler": "math", "question": problem["question"], "answer": problem["answer"]},
                "num_samples": samples,
                "timeout_seconds": 120,
                "sampling_params": {"temperature": 1.0, "max_tokens": 256},
                "metadata": {"problem_id": problem["id"], "policy_version": 0},
            }
            http.post("/rollout/task/submit", json=body).raise_for_status()
            pending[task_id] = None
        results: list[JobResult] = []
        columns = (TextColumn("rollouts"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(*columns, console=console) as progress:
            bar = progress.add_task("rollouts", total=total)
            while pending:
                for task_id in list(pending):
                    status = http.get(f"/rollout/task/{task_id}").json()
                    if status["state"] == "completed":
                        results.extend(JobResult.model_validate(s["result"]) for s in status["sessions"])
                        del pending[task_id]
                progress.update(bar, completed=len(results))
                if pending:
                    time.sleep(0.25)
    return results, time.monotonic() - started
