"""The live farm snapshot: the same reads as GET /status plus stage counters and recent failures."""

from __future__ import annotations

from typing import Any

from farm.models.results import STAGES
from farm.status import farm_status
from farm.ui.job_pages import recent_rows
from farm.web.shared_state import SharedState

FAILED_STATES = ("failed", "timeout")
RECENT_FAILURE_WINDOW = 500
"""Newest jobs looked at for the failure breakdown (bounded: one Lua call, never the whole farm)."""


async def live_snapshot(farm: SharedState) -> dict[str, Any]:
    snapshot = await farm_status(farm)
    stats = await farm.store.stats()
    counts = snapshot["jobs"]
    snapshot["stages"] = [
        {
            "stage": stage,
            "queue_depth": snapshot["queues"].get(stage, 0)
            + sum(n for q, n in snapshot["queues"].items() if stage == "run" and q.startswith("run.")),
            "in_flight": counts.get(stage, 0),
            "completed": int(stats.get(f"stage_count:{stage}", 0)),
            "mean_s": _mean(stats, stage),
        }
        for stage in STAGES
    ]
    rows = await recent_rows(farm.store.index, RECENT_FAILURE_WINDOW)
    failures = [r for r in rows if r.state in FAILED_STATES]
    by_class: dict[str, int] = {}
    for row in failures:
        by_class[row.error_class] = by_class.get(row.error_class, 0) + 1
    snapshot["failures"] = {
        "window": len(rows),
        "by_class": dict(sorted(by_class.items(), key=lambda kv: -kv[1])),
        "recent": [r.model_dump() for r in failures[:10]],
    }
    return snapshot


def _mean(stats: dict[str, float], stage: str) -> float | None:
    n = stats.get(f"stage_count:{stage}", 0)
    return stats.get(f"stage_seconds_sum:{stage}", 0.0) / n if n else None
