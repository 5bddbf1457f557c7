"""`farm demo`: a local farm, a batch of math tasks through the task API, a live progress bar, a
summary table, and the trajectories as JSONL.

The demo's farm keeps its state apart from anything else: a private redis-server, or with
FARM_REDIS_URL an empty database of that server claimed for the demo and flushed at its end. Ctrl-C
writes the rollouts finished so far and exits 130.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import redis
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn
from rich.table import Table

from farm import keys
from farm.embedded_redis import port_in_use
from farm.identity import mask_url
from farm.launcher import FarmStartError, LocalFarm, default_workers, stop_signals_as_keyboard_interrupt
from farm.models.results import JobResult
from farm.redis_clients import redis_answers
from farm.report.summary import summarize

HARNESS_INSTRUCTION = "Fix the add function in calc.py so that test_calc.py passes."
"""The harness demo's task (handlers/harness/scripts/harness.jsonl has a script per harness for it)."""
HARNESS_TEST = """\
import ctypes, subprocess, sys

# The verdict is made here, where the code under test never runs (docs/CONTRACT.md, task authoring): it runs
# in a child process, which may not trace this one (PR_SET_DUMPABLE 0), and only its output comes back.
ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)
code = "from calc import add; print(add(2, 3))"
child = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
got = child.stdout.strip().splitlines()[-1:] or [child.stderr.strip()[-300:]]
assert got == ["5"], f"add(2, 3) = {got[0]}"
print("ok")
"""
HARNESS_FILES = {"calc.py": "def add(a, b):\n    return a - b\n", "test_calc.py": HARNESS_TEST}
"""The workspace the agent starts from: a copy of the test is there for it to run, not to be scored by."""
HIDDEN_TEST_FILES = {"test_calc.py": HARNESS_TEST}
"""The evaluator's own copy, written over whatever the rollout left at that name (issue 34 item 9): a
rollout that rewrites test_calc.py to print "ok" is scored by the real test, not by its own."""
CLAIM_KEY = keys.DEMO_CLAIM
"""Set in the database a demo took for itself (so two demos never take the same one)."""
INTERRUPTED = 130


def math_problems() -> list[dict[str, Any]]:
    # Found without importing `handlers.math` (whose __init__ imports the math handler and the agent stack
    # under it: 2.4 s of CPU on a loaded 2-core machine, paid before `farm demo` could even say that its
    # port is taken); the demo process runs no handler.
    spec = importlib.util.find_spec("handlers")
    if spec is None or not spec.submodule_search_locations:
        raise FarmStartError("the handlers package is not installed")
    text = (Path(spec.submodule_search_locations[0]) / "math" / "problems.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]


def harness_task(task_id: str, harness: str, command: str, samples: int) -> dict[str, Any]:
    """A harness CLI fixes calc.py in a fresh repository; the reward is its test in a fresh runtime."""
    prepare: list[dict[str, Any]] = [{"write": k, "content": v} for k, v in HARNESS_FILES.items()]
    return {
        "task_id": task_id,
        "instruction": HARNESS_INSTRUCTION,
        "num_samples": samples,
        "timeout_seconds": 300,
        "runtime": {"prepare": [*prepare, {"git_init": True}]},
        "agent": {"harness": harness, "command": command},
        "builder": {"strategy": "prefix_merging"},
        "evaluator": {
            "strategy": "test_on_output",
            "config": {"command": "python3 test_calc.py", "fresh": True, "files": HIDDEN_TEST_FILES},
        },
        "metadata": {"problem_id": f"harness-{harness}", "policy_version": 0},
    }


def _harness_env(command: str) -> dict[str, str]:
    """Sandboxes see no home directories: grant the directory tree the harness CLI is installed in."""
    path = Path(command)
    if not path.is_absolute():
        return {}
    prefix = next((p for p in path.parents if p.name == "node_modules"), path.parent)
    granted = [d for d in os.environ.get("FARM_HARNESS_CLI_DIRS", "").split(":") if d]
    return {"FARM_HARNESS_CLI_DIRS": ":".join([*granted, str(prefix.parent)])}


def math_task(task_id: str, problem: dict[str, Any], samples: int) -> dict[str, Any]:
    return {
        "task_id": task_id,
        "instance": {"handler": "math", "question": problem["question"], "answer": problem["answer"]},
        "num_samples": samples,
        "timeout_seconds": 120,
        "sampling_params": {"temperature": 1.0, "max_tokens": 256},
        "metadata": {"problem_id": problem["id"], "policy_version": 0},
    }


def cycle_problems(problems: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    """`n` problems: the suite's, repeated when `n` is larger; repeats get ids of their own."""
    if not problems:
        raise ValueError("the math suite is empty")
    out = []
    for i in range(n):
        problem, lap = problems[i % len(problems)], i // len(problems)
        out.append(problem if lap == 0 else {**problem, "id": f"{problem['id']}-r{lap}"})
    return out


def claim_database(url: str, databases: range = range(15, 0, -1)) -> str:
    """The URL of an empty database of the server at `url`, claimed for the demo (CLAIM_KEY)."""
    base, _, _ = url.partition("?")
    head, slash, tail = base.rpartition("/")
    server = head if slash and tail.isdigit() else base.rstrip("/")
    for db in databases:
        candidate = f"{server}/{db}"
        client = redis.Redis.from_url(candidate)
        try:
            if client.dbsize() == 0 and client.set(CLAIM_KEY, "1", nx=True):
                if client.dbsize() == 1:
                    return candidate
                client.delete(CLAIM_KEY)
        finally:
            client.close()
    raise FarmStartError(f"Redis at {mask_url(url)} has no empty database for the demo (tried 15..1)")


def release_database(url: str) -> None:
    client = redis.Redis.from_url(url)
    try:
        client.flushdb()
    finally:
        client.close()


def percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def summarise(results: list[JobResult]) -> Table:
    """The run's one throughput figure is `farm report`'s (farm/report/summary.py: rollouts done per
    second from the first submission to the last end, read from the jobs' own times), so the demo and
    a report of its JSONL say the same number."""
    summary = summarize(results)
    table = Table(title=f"{len(results)} rollouts in {summary.wall_time_s:.1f} s")
    table.add_column("metric")
    table.add_column("value", justify="right")
    states: dict[str, int] = {}
    for r in results:
        states[r.state.value] = states.get(r.state.value, 0) + 1
    rewards = [r.reward for r in results if r.reward is not None]
    table.add_row("rollouts/s (done)", f"{summary.rollouts_per_s:.2f}")
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


@dataclass
class Batch:
    results: list[JobResult] = field(default_factory=list)
    started: float = field(default_factory=time.monotonic)

    @property
    def wall_s(self) -> float:
        return max(time.monotonic() - self.started, 1e-9)


def run_demo(
    n_tasks: int,
    samples: int,
    out: Path,
    llm_args: list[str],
    run_concurrency: int,
    redis_url: str | None = None,
    api_port: int | None = None,
    harness: tuple[str, str] | None = None,
    redis_port: int = 0,
    llm_port: int = 0,
) -> int:
    """Runs the demo; returns the exit code (0, or INTERRUPTED after Ctrl-C). With `harness` (name,
    command) each task runs that harness CLI on the calc.py task instead of a math problem."""
    console = Console()
    bodies = _demo_tasks(n_tasks, samples, harness)
    if api_port and port_in_use(api_port):
        raise FarmStartError(f"port {api_port} in use")
    if redis_url and not redis_answers(redis_url):
        raise FarmStartError(f"Redis at {mask_url(redis_url)} does not answer (FARM_REDIS_URL)")
    own_db = (
        claim_database(redis_url) if redis_url and redis_url.startswith(("redis://", "rediss://")) else None
    )
    farm = LocalFarm(
        redis_url=own_db or redis_url,
        api_port=api_port or 0,
        redis_port=redis_port,
        llm_port=llm_port,
        check_port=bool(api_port),
        workers=default_workers(run_concurrency),
        llm_args=llm_args,
        supervise=True,
        env=_harness_env(harness[1]) if harness else {},
    )
    batch, code = Batch(), 0
    with stop_signals_as_keyboard_interrupt():
        try:
            with console.status("starting Redis, API, workers and the reference LLM…"):
                farm.start()
            where = "a private redis-server" if redis_url is None else mask_url(farm.redis_url or "")
            console.print(f"farm up at {farm.api_url}, Redis: {where}")
            _run_batch(console, farm.api_url, bodies, samples, batch)
        except KeyboardInterrupt:
            console.print(f"interrupted after {len(batch.results)} rollouts; stopping the farm")
            code = INTERRUPTED
        finally:
            with contextlib.suppress(KeyboardInterrupt):
                farm.stop()
                if own_db:
                    release_database(own_db)
    _write_run(console, out, batch.results)
    return code


def _write_run(console: Console, out: Path, results: list[JobResult]) -> None:
    if not results:
        # no empty run file: the README's `farm report farm-runs/demo-*.jsonl` would pick it up
        console.print("no rollout finished; no run file written")
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w") as fh:
        for result in results:
            fh.write(result.model_dump_json() + "\n")
    console.print(summarise(results))
    console.print(f"trajectories: {out}")
    # this farm (and its viewer) is gone; any farm's API serves run files from FARM_RUNS_DIR at /ui/runs
    console.print(f"to view them: `farm up`, then <its API>/ui/runs (FARM_RUNS_DIR={out.parent})")


def _demo_tasks(n_tasks: int, samples: int, harness: tuple[str, str] | None) -> list[dict[str, Any]]:
    stamp = time.strftime("%Y%m%d%H%M%S")
    if harness is None:
        problems = cycle_problems(math_problems(), n_tasks)
        return [math_task(f"demo-{stamp}-{p['id']}", p, samples) for p in problems]
    return [harness_task(f"demo-{stamp}-{harness[0]}-{i}", *harness, samples) for i in range(n_tasks)]


def _run_batch(console: Console, api: str, bodies: list[dict[str, Any]], samples: int, batch: Batch) -> None:
    total = len(bodies) * samples
    batch.started = time.monotonic()
    with httpx.Client(base_url=api, timeout=30) as http:
        pending: dict[str, None] = {}
        for body in bodies:
            http.post("/rollout/task/submit", json=body).raise_for_status()
            pending[body["task_id"]] = None
        results = batch.results
        # No clock of its own: the summary's wall time and rate are the run's one figure.
        columns = (TextColumn("rollouts"), BarColumn(), MofNCompleteColumn())
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
