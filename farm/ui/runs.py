"""Run files (`farm report` / `farm demo` JSONL, one JobResult a line) from the runs directory, summarized
with the report's own functions and drawn as small inline SVG line charts (no JavaScript, no CDN)."""

from __future__ import annotations

import os
from pathlib import Path

from fastapi import HTTPException
from pydantic import BaseModel

from farm.report.runs import load_run, spans
from farm.report.summary import RunSummary, summarize, throughput_series

RUN_SUFFIXES = (".jsonl", ".json")
WIDTH, HEIGHT, PAD = 420.0, 140.0, 6.0


class RunFile(BaseModel):
    name: str
    size: int
    modified: float


class Chart(BaseModel):
    title: str
    points: str
    """SVG polyline points in a WIDTH x HEIGHT box; empty when there is nothing to draw."""
    x_max: float
    y_min: float
    y_max: float


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


def chart(title: str, xs: list[float], ys: list[float]) -> Chart:
    """Scales (xs, ys) into the chart box, y growing upwards; a flat series sits in the middle."""
    if not xs:
        return Chart(title=title, points="", x_max=0.0, y_min=0.0, y_max=0.0)
    x0, x1 = min(xs), max(xs)
    y0, y1 = min(0.0, min(ys)), max(ys)
    sx = (WIDTH - 2 * PAD) / (x1 - x0) if x1 > x0 else 0.0
    sy = (HEIGHT - 2 * PAD) / (y1 - y0) if y1 > y0 else 0.0
    pts = []
    for x, y in zip(xs, ys, strict=True):
        px = PAD + (x - x0) * sx if sx else WIDTH / 2
        py = HEIGHT - PAD - (y - y0) * sy if sy else HEIGHT / 2
        pts.append(f"{px:.1f},{py:.1f}")
    return Chart(title=title, points=" ".join(pts), x_max=x1, y_min=y0, y_max=y1)


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
    charts = [
        chart("finished jobs / s over time", times, rates),
        chart("mean reward so far, over time", reward_t, reward_y),
    ]
    if len(steps) > 1:
        charts.append(chart("mean reward per step", [s.step for s in steps], [s.mean_reward for s in steps]))
    return RunView(name=name, summary=summary, skipped_lines=run.skipped_lines, charts=charts)
