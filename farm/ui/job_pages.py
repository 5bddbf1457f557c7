"""Pages of jobs read through the job store's index (farm/jobs/index.py: the `farm:jobs:index` zset, newest
first, and one Lua call per chunk).

A page never costs O(jobs in the farm): rows are read in chunks from a score cursor and the search stops
after SCAN_BUDGET rows even if the filter matched fewer than a page (the page then says how far it got and
the next cursor continues from there). Results can hold every token of every trace, so the Lua script
pulls only the reward and the error class out of the stored result instead of shipping it whole."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

from farm.jobs.index import AsyncJobIndex
from farm.text import as_text_or_none as _s

CHUNK = 200
SCAN_BUDGET = 2000


class JobRow(BaseModel):
    job_id: str
    state: str
    handler: str = ""
    task_id: str | None = None
    group_id: str | None = None
    policy_version: float | int | str | None = None
    created_at: float = 0.0
    finished_at: float | None = None
    queued_s: float = 0.0
    stage_s: float = 0.0
    node: str | None = None
    reward: float | None = None
    error_stage: str | None = None
    error_type: str | None = None

    @property
    def duration_s(self) -> float:
        return self.queued_s + self.stage_s

    @property
    def error_class(self) -> str:
        return f"{self.error_stage}:{self.error_type}" if self.error_type else "unknown"


class JobFilter(BaseModel):
    state: str | None = None
    handler: str | None = None
    task: str | None = None
    group: str | None = None
    policy_version: str | None = None
    min_reward: float | None = None
    max_reward: float | None = None
    min_duration: float | None = None

    def matches(self, row: JobRow) -> bool:
        checks = (
            self.state is None or row.state == self.state,
            self.handler is None or row.handler == self.handler,
            self.task is None or row.task_id == self.task,
            self.group is None or row.group_id == self.group,
            self.policy_version is None or str(row.policy_version) == self.policy_version,
            self.min_reward is None or (row.reward is not None and row.reward >= self.min_reward),
            self.max_reward is None or (row.reward is not None and row.reward <= self.max_reward),
            self.min_duration is None or row.duration_s >= self.min_duration,
        )
        return all(checks)


class JobPage(BaseModel):
    rows: list[JobRow]
    next_cursor: float | None
    """Pass as `cursor` for the following page; None at the end of the index."""
    scanned: int
    total: int
    """Jobs in the index (ZCARD, O(1))."""


def _f(value: Any) -> float:
    text = _s(value)
    return float(text) if text else 0.0


def parse_row(job_id: str, fields: list[Any]) -> JobRow | None:
    state, spec_raw, created, finished, t_q, t_i, t_r, t_e, node, reward, e_stage, e_type = fields
    if state is None or spec_raw is None:
        return None
    spec = json.loads(spec_raw)
    meta = spec.get("metadata") or {}
    reward_text = _s(reward)
    return JobRow(
        job_id=job_id,
        state=_s(state) or "",
        handler=spec.get("handler", ""),
        task_id=spec.get("task_id") or meta.get("task_id"),
        group_id=meta.get("group_id", spec.get("task_id")),
        policy_version=meta.get("policy_version"),
        created_at=_f(created),
        finished_at=_f(finished) if finished is not None else None,
        queued_s=_f(t_q),
        stage_s=_f(t_i) + _f(t_r) + _f(t_e),
        node=_s(node),
        reward=float(reward_text) if reward_text not in (None, "null") else None,
        error_stage=_s(e_stage),
        error_type=_s(e_type),
    )


async def rows_for(index: AsyncJobIndex, job_ids: list[str]) -> list[JobRow]:
    if not job_ids:
        return []
    fields = await index.rows(job_ids)
    rows = (parse_row(j, fields[j]) for j in job_ids)
    return [r for r in rows if r is not None]


async def recent_rows(index: AsyncJobIndex, limit: int) -> list[JobRow]:
    return await rows_for(index, await index.newest(limit))


async def job_page(
    index: AsyncJobIndex, flt: JobFilter, page_size: int = 50, cursor: float | None = None
) -> JobPage:
    rows: list[JobRow] = []
    scanned = 0
    top: str = "+inf" if cursor is None else f"({cursor!r}"
    next_cursor: float | None = None
    while len(rows) < page_size and scanned < SCAN_BUDGET:
        chunk = await index.older_than(top, CHUNK)
        if not chunk:
            next_cursor = None
            break
        by_id = {r.job_id: r for r in await rows_for(index, [job_id for job_id, _ in chunk])}
        for job_id, score in chunk:
            scanned += 1
            next_cursor = score
            row = by_id.get(job_id)
            if row is not None and flt.matches(row):
                rows.append(row)
                if len(rows) == page_size:
                    break
        else:
            if len(chunk) < CHUNK:
                next_cursor = None
                break
        top = f"({next_cursor!r}"
    total = await index.size()
    return JobPage(rows=rows, next_cursor=next_cursor, scanned=scanned, total=total)
