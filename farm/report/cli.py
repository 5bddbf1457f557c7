"""`farm report RUN.jsonl [MORE.jsonl | 'farm-runs/*.jsonl' ...]`: a summary table in the terminal and PNG
plots beside the (first) run."""

from __future__ import annotations

from pathlib import Path

import click
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from farm.report.plots import PlotsUnavailable, write_plots
from farm.report.runs import expand, load_run, spans
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

    render_terminations(summary, console)

    if len(summary.steps) > 1:
        steps = Table(title="Reward per step")
        for column in ("step", "jobs", "mean reward", "solved", "turn versions", "mixed-version jobs"):
            steps.add_column(column, justify="right")
        steps.add_column("reward curve (0 to 1)", justify="left", no_wrap=True, min_width=20)
        for s in summary.steps:
            versions = ", ".join(map(str, s.turn_versions)) or "-"
            reward = f"{s.mean_reward:.3f}"
            bar = reward_bar(s.mean_reward)
            steps.add_row(str(s.step), str(s.jobs), reward, f"{s.solved:.1%}", versions, str(s.mixed), bar)
        console.print(steps)


def render_terminations(summary: RunSummary, console: Console) -> None:
    """Jobs per termination reason, and tool-call parse outcomes with the unparsed rate."""
    if summary.termination_reasons:
        reasons = Table(title="Termination reasons")
        reasons.add_column("reason")
        reasons.add_column("jobs", justify="right")
        reasons.add_column("share", justify="right")
        for reason, count in summary.termination_reasons.items():
            reasons.add_row(reason, str(count), f"{count / max(summary.jobs, 1):.1%}")
        console.print(reasons)
    if summary.tool_call_parsing:
        parsing = Table(title=f"Tool-call parsing (unparsed rate {_fmt(summary.unparsed_rate, '.1%')})")
        for column in ("family", "parser", "calls", "no_call", "unparsed", "malformed", "unparsed rate"):
            parsing.add_column(column, justify="left" if column in ("family", "parser") else "right")
        for row in summary.tool_call_parsing:
            counts = [str(row.outcomes.get(o, 0)) for o in ("calls", "no_call", "unparsed", "malformed")]
            parsing.add_row(row.family, row.parser, *counts, _fmt(row.unparsed_rate, ".1%"))
        console.print(parsing)


def reward_bar(reward: float, width: int = 20) -> str:
    """A text bar for a reward in [0, 1] (clamped), so the curve reads in a terminal without plots."""
    cells = round(max(0.0, min(1.0, reward)) * width) if reward == reward else 0
    return "█" * cells + "·" * (width - cells)


def render_runs(runs: dict[str, RunSummary], console: Console) -> None:
    table = Table(title="Per run file")
    for column in ("file", "jobs", "done", "mean reward", "solved", "rollouts / s"):
        table.add_column(column, justify="left" if column == "file" else "right")
    for name, s in runs.items():
        done = str(s.by_state.get("done", 0))
        table.add_row(
            Path(name).name,
            str(s.jobs),
            done,
            _fmt(s.mean_reward),
            _fmt(s.solved, ".1%"),
            _fmt(s.rollouts_per_s, ".2f"),
        )
    console.print(table)


@click.command("report")
@click.argument("run_files", nargs=-1, required=True)
@click.option(
    "--out",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="Directory for the PNG plots [default: RUN_report/ beside the (first) file].",
)
@click.option("--plots/--no-plots", default=True, help="Write PNG plots (needs matplotlib).")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON instead of tables.")
def report(run_files: tuple[str, ...], out: Path | None, plots: bool, as_json: bool) -> None:
    """Summarize RUN_FILES (one JobResult per line; files or glob patterns, taken together) and plot
    throughput, stage times and reward (per step, per run file or per problem)."""
    console = Console()
    try:
        paths = expand(run_files)
    except FileNotFoundError as exc:
        raise click.ClickException(f"no run file matches {exc.args[0]}") from None
    loaded = {str(path): load_run(path) for path in paths}
    results = [r for run in loaded.values() for r in run.results]
    if not results:
        raise click.ClickException(f"{', '.join(loaded)}: no JobResult lines")
    run_spans = spans(results)
    summary = summarize(results, run_spans)
    per_file = {name: summarize(run.results) for name, run in loaded.items() if run.results}
    if as_json:
        click.echo(summary.model_dump_json(indent=2))
    else:
        title = paths[0].name if len(paths) == 1 else f"{len(paths)} run files"
        render(summary, console, title=str(paths[0]) if len(paths) == 1 else title)
        if len(per_file) > 1:
            render_runs(per_file, console)
    for name, run in loaded.items():
        if run.skipped_lines:
            shown = ", ".join(map(str, run.skipped_lines[:10]))
            console.print(
                f"[yellow]{name}: skipped {len(run.skipped_lines)} line(s) that are not JobResults: {shown}"
            )
    if not plots:
        return
    suffix = "_report" if len(paths) == 1 else f"_and_{len(paths) - 1}_more_report"
    target = out or paths[0].with_name(f"{paths[0].stem}{suffix}")
    try:
        written = write_plots(results, run_spans, summary, target, runs=per_file)
    except PlotsUnavailable as exc:
        console.print(f"[yellow]plots skipped: {escape(str(exc))}")  # the hint holds `[report]`
        return
    for path in written:
        console.print(f"wrote {path}")
