"""A task or group of samples: its jobs, rewards and whether the group carries signal for GRPO/DAPO.

A group with every finished reward equal has zero advantage for every sample (GRPO normalizes rewards
within the group; DAPO's dynamic sampling drops such groups), so it teaches the policy nothing."""

from __future__ import annotations

import statistics

from pydantic import BaseModel

from farm.ui.job_pages import JobFilter, JobRow, job_page, rows_for
from farm.web.shared_state import SharedState


class GroupView(BaseModel):
    group_id: str
    is_task: bool
    rows: list[JobRow]
    rewards: list[float]
    mean: float | None
    std: float | None
    finished: int
    informative: bool | None
    """None until two samples have a reward."""
    complete: bool
    """False when the group was searched for in the index and the search budget ran out."""


def summarize(group_id: str, rows: list[JobRow], is_task: bool, complete: bool) -> GroupView:
    rewards = [r.reward for r in rows if r.reward is not None]
    return GroupView(
        group_id=group_id,
        is_task=is_task,
        rows=rows,
        rewards=rewards,
        mean=statistics.fmean(rewards) if rewards else None,
        std=statistics.pstdev(rewards) if rewards else None,
        finished=sum(r.state in ("done", "failed", "cancelled", "timeout") for r in rows),
        informative=len(set(rewards)) > 1 if len(rewards) >= 2 else None,
        complete=complete,
    )


async def group_view(farm: SharedState, group_id: str) -> GroupView:
    task = await farm.tasks.sessions(group_id)
    if task:
        return summarize(group_id, await rows_for(farm.store.index, task[0]), is_task=True, complete=True)
    page = await job_page(farm.store.index, JobFilter(group=group_id), page_size=500)
    return summarize(group_id, page.rows, is_task=False, complete=page.next_cursor is None)
