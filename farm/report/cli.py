"""`farm report RUN.jsonl`: a summary table in the terminal and PNG plots beside the run."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console
from rich.table import Table

from farm.report.plots import PlotsUnavailable, write_plots
from farm.report.runs import load_run, spans
from farm.report.summary import RunSummary, summarize


def _fmt(value: float | None, spec: str = ".3f") -> str:
    return "-" if value is None else format(value, spec)


def render(summary: RunSummary, console: Console, title: str) -> None:
    overview = Table(title=title, show_header=False)
    overview.add_column("what", style="bold")
    overview.add_column("value", justify="right")
    overview.add_row("jobs", str(summary.jobs))
    for state, count in summary.by_state.items():
        overview.add_row(f"  {state}", str(count))
    overview.add_row("handlers", ", ".join(f"{h} ({n})" for h, n in summary.by_handler.items()))
    overview.add_row("mean reward", _fmt(summary.mean_reward))
    overview.add_row("solved (reward > 0)", _fmt(summary.solved, ".1%"))
    overview.add_row("wall time (s)", _fmt(summary.wall_time_s, ".2f"))
    overview.add_row("rollouts / s", _fmt(summary.rollouts_per_s, ".2f"))
    overview.add_row("traces / trained tokens", f"{summary.traces} / {summary.trained_tokens}")
    for error, count in summary.errors.items():
        overview.add_row(f"error {error}", str(count))
    console.print(overview)

    stages = Table(title="Stage times (s)")
    for column in ("stage", "mean", "p50", "p90", "p99", "max"):
        stages.add_column(column, justify="left" if column == "stage" else "right")
    for stage, p in summary.stage_times.items():
        stages.add_row(stage, *(f"{v:.3f}" for v in (p.mean, p.p50, p.p90, p.p99, p.max)))
    console.print(stages)

    if len(summary.steps) > 1:
        steps = Table(title="Reward per step")
        for column in ("step", "jobs", "mean reward", "solved"):
            steps.add_column(column, justify="right")
        for s in summary.steps:
            steps.add_row(str(s.step), str(s.jobs), f"{s.mean_reward:.3f}", f"{s.solved:.1%}")
        console.print(steps)


@click.command("report")
@click.argument("run_file", type=click.Path(exists=True, dir_okay=False, path_type=Path))
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Directory for the PNG plots [default: RUN_report/ beside the file].",
)
@click.option("--plots/--no-plots", default=True, help="Write PNG plots (needs matplotlib).")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON instead of tables.")
def report(run_file: Path, out: Path | None, plots: bool, as_json: bool) -> None:
    """Summarize RUN_FILE (one JobResult per line) and plot throughput, stage times and reward per step."""
    console = Console()
    run = load_run(run_file)
    if not run.results:
        raise click.ClickException(f"{run_file}: no JobResult lines")
    run_spans = spans(run.results)
    summary = summarize(run.results, run_spans)
    if as_json:
        click.echo(summary.model_dump_json(indent=2))
    else:
        render(summary, console, title=str(run_file))
    if run.skipped_lines:
        shown = ", ".join(map(str, run.skipped_lines[:10]))
        console.print(f"[yellow]skipped {len(run.skipped_lines)} line(s) that are not JobResults: {shown}")
    if not plots:
        return
    target = out or run_file.with_name(f"{run_file.stem}_report")
    try:
        written = write_plots(run.results, run_spans, summary, target)
    except PlotsUnavailable as exc:
        console.print(f"[yellow]plots skipped: {exc}")
        return
    for path in written:
        console.print(f"wrote {path}")
