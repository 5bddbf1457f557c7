"""PNG plots of a run. matplotlib is optional: without it `write_plots` raises PlotsUnavailable."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from farm.models import JobResult
from farm.report.runs import Span
from farm.report.summary import TIMED, RunSummary, reward_by_group, throughput_series


class PlotsUnavailable(RuntimeError):
    pass


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError as exc:
        raise PlotsUnavailable("need the report extra: pip install -e '.[report]'") from exc
    matplotlib.use("Agg")  # files only, never a window
    import matplotlib.pyplot as plt

    return plt


def write_plots(
    results: list[JobResult],
    run_spans: list[Span],
    summary: RunSummary,
    out: Path,
    runs: dict[str, RunSummary] | None = None,
) -> list[Path]:
    """Throughput, stage times and one reward view: per training step when the run has several, else
    per run file when several were given, else per problem (a demo or a single-step batch)."""
    plt = _pyplot()
    out.mkdir(parents=True, exist_ok=True)
    written = []

    figure, axis = plt.subplots(figsize=(7, 3.5))
    centres, rates = throughput_series(run_spans)
    axis.plot(centres, rates, marker=".")
    axis.set_xlabel("time since first submission (s)")
    axis.set_ylabel("rollouts finished (1/s)")
    axis.set_title(f"Throughput (mean {summary.rollouts_per_s:.2f} rollouts/s)")
    written.append(_save(figure, out / "throughput.png", plt))

    figure, axes = plt.subplots(1, len(TIMED), figsize=(3.2 * len(TIMED), 3), squeeze=False)
    for axis, stage in zip(axes[0], TIMED, strict=True):
        axis.hist([float(getattr(r.timings, stage)) for r in results], bins=30)
        axis.set_title(f"{stage} (p50 {summary.stage_times[stage].p50:.2f} s)")
        axis.set_xlabel(f"time in {stage} (s)")
    axes[0][0].set_ylabel("jobs (count)")
    written.append(_save(figure, out / "stage_times.png", plt))

    if len(summary.steps) > 1:
        written.append(_reward_per_step(plt, summary, out / "reward_per_step.png"))
    elif runs and len(runs) > 1:
        written.append(_reward_by_run(plt, runs, out / "reward_by_run.png"))
    else:
        written.append(_reward_by_problem(plt, results, out / "reward_by_problem.png"))
    return written


def _reward_per_step(plt: Any, summary: RunSummary, path: Path) -> Path:
    figure, axis = plt.subplots(figsize=(7, 3.5))
    steps = [s.step for s in summary.steps]
    axis.plot(steps, [s.mean_reward for s in summary.steps], marker="o", label="mean reward")
    axis.plot(steps, [s.solved for s in summary.steps], marker="x", label="solved (fraction)")
    axis.set_xlabel("step (metadata.step or policy_version)")
    axis.set_ylabel("reward / fraction")
    axis.set_title("Reward per step")
    axis.legend()
    return _save(figure, path, plt)


def _reward_by_run(plt: Any, runs: dict[str, RunSummary], path: Path) -> Path:
    figure, axis = plt.subplots(figsize=(max(5, 1.2 * len(runs)), 3.5))
    names = list(runs)
    axis.bar(range(len(names)), [runs[n].mean_reward or 0.0 for n in names])
    axis.set_xticks(range(len(names)), [Path(n).stem for n in names], rotation=30, ha="right")
    axis.set_ylabel("mean reward")
    axis.set_title("Reward per run file")
    return _save(figure, path, plt)


def _reward_by_problem(plt: Any, results: list[JobResult], path: Path) -> Path:
    rows = reward_by_group(results)
    figure, axis = plt.subplots(figsize=(7, 3.5))
    axis.bar(range(len(rows)), [mean for _, _, mean in rows], width=1.0)
    signal = sum(1 for _, n, mean in rows if n > 1 and 0 < mean < 1)
    axis.set_xlabel(f"problem, best first ({len(rows)} problems)")
    axis.set_ylabel("mean reward over its samples")
    axis.set_title(f"Reward by problem ({signal} groups with reward variance)")
    return _save(figure, path, plt)


def _save(figure: Any, path: Path, plt: Any) -> Path:
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path
