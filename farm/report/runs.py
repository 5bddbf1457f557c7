"""Reading a run file (one JobResult per line, as `farm demo` writes) and placing each job in time."""

from __future__ import annotations

import glob
import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from pydantic import ValidationError

from farm.models import JobResult


@dataclass(frozen=True)
class Run:
    results: list[JobResult]
    skipped_lines: list[int]
    """1-based numbers of lines that were not a JobResult (kept out, reported)."""


def load_run(path: str | Path) -> Run:
    results: list[JobResult] = []
    skipped: list[int] = []
    with Path(path).open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if not line.strip():
                continue
            try:
                results.append(JobResult.model_validate(json.loads(line)))
            except (ValueError, ValidationError):
                skipped.append(number)
    return Run(results, skipped)


def expand(patterns: Iterable[str]) -> list[Path]:
    """Files named or matched by glob patterns (a pattern the shell left unexpanded, quoted or from a
    script), in order, each once; a pattern matching nothing raises FileNotFoundError naming it."""
    found: dict[Path, None] = {}
    for pattern in patterns:
        matches = sorted(glob.glob(pattern)) if glob.has_magic(pattern) else [pattern]
        files = [Path(m) for m in matches if Path(m).is_file()]
        if not files:
            raise FileNotFoundError(pattern)
        found.update(dict.fromkeys(files))
    return list(found)


@dataclass(frozen=True)
class Span:
    """When a job was submitted and finished, in seconds from the run's first submission."""

    submitted: float
    finished: float


def _number(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def spans(results: list[JobResult]) -> list[Span]:
    """Uses metadata `submitted_at` / `finished_at` (epoch seconds) when present.

    Missing `finished_at` is submitted + queued + stage times; missing `submitted_at` is finished minus
    that; with neither, every job counts as submitted at the run's start (a batch submitted at once).
    """
    starts: list[float | None] = []
    ends: list[float | None] = []
    durations: list[float] = []
    for result in results:
        duration = result.timings.queued + result.timings.in_stages
        submitted = _number(result.metadata.get("submitted_at"))
        finished = _number(result.metadata.get("finished_at"))
        if submitted is None and finished is not None:
            submitted = finished - duration
        starts.append(submitted)
        ends.append(finished)
        durations.append(duration)
    origin = min((s for s in starts if s is not None), default=0.0)
    out = []
    for submitted, finished, duration in zip(starts, ends, durations, strict=True):
        start = 0.0 if submitted is None else submitted - origin
        end = start + duration if finished is None else finished - origin
        out.append(Span(start, max(end, start)))
    return out
