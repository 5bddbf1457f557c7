"""Jobs per state and the derived counters, from the state changes the scripts record per bucket
(scripts.TRANSITION: one `from>to` counter per change, never a per-state count to keep in step)."""

from __future__ import annotations

from typing import Any

from farm.jobs import scripts
from farm.models.results import STAGES, JobState
from farm.text import as_text as _s

_STATES = {state.value for state in JobState}


def transitions(raw_by_bucket: list[dict[Any, Any]]) -> dict[tuple[str, str], int]:
    """(from, to) -> state changes made, summed over buckets."""
    made: dict[tuple[str, str], int] = {}
    for raw in raw_by_bucket:
        for field, n in raw.items():
            src, _, dst = _s(field).partition(scripts.TRANSITION)
            made[(src, dst)] = made.get((src, dst), 0) + int(n)
    return made


def state_counts(made: dict[tuple[str, str], int], active: int) -> dict[str, int]:
    """Jobs per state from the state changes: in-stage states by what came in minus what went out,
    terminal states by what came in (every job that ended), `queued` as the active jobs in no stage
    (creating a job counts nothing)."""
    counts: dict[str, int] = {}
    for (src, dst), n in made.items():
        counts[dst] = counts.get(dst, 0) + n
        counts[src] = counts.get(src, 0) - n
    counts = {state: n for state, n in counts.items() if state in _STATES}
    counts[JobState.queued.value] = active - sum(counts.get(stage, 0) for stage in STAGES)
    return {state: n for state, n in counts.items() if n > 0}


def derived_stats(made: dict[tuple[str, str], int], by_state: dict[str, int]) -> dict[str, float]:
    """The counters metrics read that the scripts do not write: jobs_total:{terminal state} and
    stage_count:{stage} (runs of a stage: changes out of it, to the next stage or to an end)."""
    stats = {f"jobs_total:{s.value}": float(by_state.get(s.value, 0)) for s in JobState if s.terminal}
    for stage in STAGES:
        stats[f"stage_count:{stage}"] = float(sum(n for (src, _), n in made.items() if src == stage))
    return stats


def sum_stats(raw_by_hash: list[dict[Any, Any]]) -> dict[str, float]:
    total: dict[str, float] = {}
    for raw in raw_by_hash:
        for name, value in raw.items():
            total[_s(name)] = total.get(_s(name), 0.0) + float(value)
    return total
