"""PNG plots of a run. matplotlib is optional: without it `write_plots` raises PlotsUnavailable."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from farm.models import JobResult
from farm.report.runs import Span
from farm.report.summary import TIMED, RunSummary, throughput_series


class PlotsUnavailable(RuntimeError):
    pass


def _pyplot() -> Any:
    try:
        import matplotlib
    except ImportError as exc:
        raise PlotsUnavailable("plots need matplotlib: pip install matplotlib") from exc
    matplotlib.use("Agg")  # files only, never a window
    import matplotlib.pyplot as plt

    return plt


def write_plots(
    results: list[JobResult], run_spans: list[Span], summary: RunSummary, out: Path
) -> list[Path]:
    plt = _pyplot()
    out.mkdir(parents=True, exist_ok=True)
    written = []

    figure, axis = plt.subplots(figsize=(7, 3.5))
    centres, rates = throughput_series(run_spans)
    axis.plot(centres, rates, marker=".")
    axis.set_xlabel("seconds since first submission")
    axis.set_ylabel("rollouts finished / s")
    axis.set_title("Throughput")
    written.append(_save(figure, out / "throughput.png", plt))

    figure, axes = plt.subplots(1, len(TIMED), figsize=(3.2 * len(TIMED), 3), squeeze=False)
    for axis, stage in zip(axes[0], TIMED, strict=True):
        axis.hist([float(getattr(r.timings, stage)) for r in results], bins=30)
        axis.set_title(f"{stage} (p50 {summary.stage_times[stage].p50:.2f}s)")
        axis.set_xlabel("seconds")
    axes[0][0].set_ylabel("jobs")
    written.append(_save(figure, out / "stage_times.png", plt))

    figure, axis = plt.subplots(figsize=(7, 3.5))
    steps = [s.step for s in summary.steps]
    axis.plot(steps, [s.mean_reward for s in summary.steps], marker="o", label="mean reward")
    axis.plot(steps, [s.solved for s in summary.steps], marker="x", label="solved fraction")
    axis.set_xlabel("step (metadata.step or policy_version)")
    axis.set_title("Reward per step")
    axis.legend()
    written.append(_save(figure, out / "reward_per_step.png", plt))
    return written


def _save(figure: Any, path: Path, plt: Any) -> Path:
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    plt.close(figure)
    return path
