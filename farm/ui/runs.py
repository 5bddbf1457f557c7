"""Run files (`farm report` / `farm demo` JSONL, one JobResult a line) from the runs directory, summarized
with the report's own functions and drawn as small inline SVG line charts (no JavaScript, no CDN), each
with labelled axes (quantity and unit) and ticks at round values."""

from __future__ import annotations

import math
import os
from pathlib import Path

from fastapi import HTTPException
from pydantic import BaseModel

from farm.report.runs import load_run, spans
from farm.report.summary import RunSummary, summarize, throughput_series

RUN_SUFFIXES = (".jsonl", ".json")
WIDTH, HEIGHT = 480.0, 220.0
LEFT, RIGHT, TOP, BOTTOM = 62.0, 14.0, 10.0, 44.0
"""The plot area inside the WIDTH x HEIGHT box; the margins hold the tick labels and the axis labels."""
TICKS = 5


class RunFile(BaseModel):
    name: str
    size: int
    modified: float


class Tick(BaseModel):
    at: float
    """Position along the axis in the SVG box (x for the x axis, y for the y axis)."""
    label: str


class Chart(BaseModel):
    title: str
    x_label: str
    y_label: str
    """Each axis's quantity and unit, e.g. "time since the first submission (s)"."""
    points: str
    """SVG polyline points in the plot area of the WIDTH x HEIGHT box; empty when there is nothing to draw."""
    x_ticks: list[Tick]
    y_ticks: list[Tick]
    x_min: float
    x_max: float
    y_min: float
    y_max: float
    """The axes' ranges (round values enclosing the data)."""


class RunView(BaseModel):
    name: str
    summary: RunSummary
    skipped_lines: list[int]
    charts: list[Chart]


def runs_dir() -> Path:
    return Path(os.environ.get("FARM_RUNS_DIR", "farm-runs"))


def list_runs(root: Path | None = None) -> list[RunFile]:
    root = root or runs_dir()
    if not root.is_dir():
        return []
    files = [p for p in root.iterdir() if p.is_file() and p.suffix in RUN_SUFFIXES]
    stats = [(p, p.stat()) for p in files]
    return [
        RunFile(name=p.name, size=st.st_size, modified=st.st_mtime)
        for p, st in sorted(stats, key=lambda x: -x[1].st_mtime)
    ]


def resolve(name: str, root: Path | None = None) -> Path:
    """A run file by its bare name inside the runs directory; anything else is a 422 naming `run`."""
    root = (root or runs_dir()).resolve()
    if not name or "/" in name or "\\" in name or name.startswith(".") or not name.endswith(RUN_SUFFIXES):
        raise HTTPException(status_code=422, detail=f"run: {name!r} is not a run file name (*.jsonl)")
    path = root / name
    if not path.is_file():
        raise HTTPException(status_code=404, detail=f"run: no run file {name!r} in {root}")
    return path


def nice_step(span: float, count: int = TICKS) -> float:
    """A round step (1, 2, 2.5 or 5 times a power of ten) giving about `count` intervals over `span`."""
    raw = span / count
    power = 10.0 ** math.floor(math.log10(raw))
    return next(m * power for m in (1.0, 2.0, 2.5, 5.0, 10.0) if m * power >= raw * (1 - 1e-9))


def axis(lo: float, hi: float, count: int = TICKS) -> tuple[float, float, list[float]]:
    """(start, end, ticks): round bounds enclosing [lo, hi] and the round values between them. A span too
    small to divide (flat data, or differences lost to rounding) becomes one unit, the data at its foot."""
    if not hi - lo > 1e-9 * max(1.0, abs(lo), abs(hi)):
        hi = lo + 1.0
    step = nice_step(hi - lo, count)
    # the tolerance keeps float noise (0.30000000000000004 / 0.1) from adding a tick; the guards keep
    # the data inside whatever the rounding did
    start, end = math.floor(lo / step + 1e-9) * step, math.ceil(hi / step - 1e-9) * step
    start, end = start - step if start > lo else start, end + step if end < hi else end
    n = round((end - start) / step)
    return start, end, [start + i * step for i in range(n + 1)]


def tick_label(value: float, step: float) -> str:
    """A tick value with as many decimals as the step needs (a 0.25 step: two), never `-0`."""
    power = math.floor(math.log10(step) + 1e-9)
    mantissa = round(step / 10.0**power, 6)
    decimals = max(0, -power + (1 if mantissa == 2.5 else 0))
    text = f"{value:.{decimals}f}"
    return "0" if float(text) == 0 else text


def chart(
    title: str, xs: list[float], ys: list[float], *, x_label: str, y_label: str, x_from_zero: bool = True
) -> Chart:
    """Scales (xs, ys) into the plot area, y growing upwards, with round ticks on both axes; the y axis
    starts at 0 or below, and so does the x axis unless `x_from_zero` is false."""
    if not xs:
        return Chart(
            title=title,
            x_label=x_label,
            y_label=y_label,
            points="",
            x_ticks=[],
            y_ticks=[],
            x_min=0.0,
            x_max=0.0,
            y_min=0.0,
            y_max=0.0,
        )
    x0, x1, xt = axis(min(0.0, min(xs)) if x_from_zero else min(xs), max(xs))
    y0, y1, yt = axis(min(0.0, min(ys)), max(ys))
    plot_w, plot_h = WIDTH - LEFT - RIGHT, HEIGHT - TOP - BOTTOM

    def px(x: float) -> float:
        return LEFT + (x - x0) / (x1 - x0) * plot_w

    def py(y: float) -> float:
        return TOP + plot_h - (y - y0) / (y1 - y0) * plot_h

    points = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in zip(xs, ys, strict=True))
    x_step, y_step = xt[1] - xt[0], yt[1] - yt[0]
    return Chart(
        title=title,
        x_label=x_label,
        y_label=y_label,
        points=points,
        x_ticks=[Tick(at=round(px(v), 1), label=tick_label(v, x_step)) for v in xt],
        y_ticks=[Tick(at=round(py(v), 1), label=tick_label(v, y_step)) for v in yt],
        x_min=x0,
        x_max=x1,
        y_min=y0,
        y_max=y1,
    )


def run_view(name: str, root: Path | None = None) -> RunView:
    run = load_run(resolve(name, root))
    run_spans = spans(run.results)
    summary = summarize(run.results, run_spans)
    times, rates = throughput_series(run_spans)
    steps = summary.steps
    by_finish = sorted(zip(run_spans, run.results, strict=True), key=lambda p: p[0].finished)
    running, total, reward_t, reward_y = 0, 0.0, [], []
    for span, result in by_finish:
        if result.reward is not None:
            running += 1
            total += result.reward
            reward_t.append(span.finished)
            reward_y.append(total / running)
    elapsed = "time since the first submission (s)"
    charts = [
        chart("Throughput", times, rates, x_label=elapsed, y_label="finished jobs / s"),
        chart("Mean reward so far", reward_t, reward_y, x_label=elapsed, y_label="mean reward (running)"),
    ]
    if len(steps) > 1:
        charts.append(
            chart(
                "Mean reward per step",
                [s.step for s in steps],
                [s.mean_reward for s in steps],
                x_label="trainer step",
                y_label="mean reward",
            )
        )
    return RunView(name=name, summary=summary, skipped_lines=run.skipped_lines, charts=charts)
