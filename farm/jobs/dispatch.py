"""What a job's stage messages carry besides the job id: fixed task ids, priorities, and the stage that
follows each one. The messages themselves are built by farm/jobs/messages.py and enqueued by the Lua
script that records the job or ends the stage before (farm/jobs/scripts.py)."""

from __future__ import annotations

from itertools import pairwise

from farm.models.results import STAGES

MOST_URGENT = 9
"""Job priorities run from 0 (normal) to 9; init takes the most urgent waiting job first."""

FOLLOWING_STAGE = dict(pairwise(STAGES))
"""init → run → eval: the stage whose message a stage's end enqueues."""


def broker_priority(priority: int) -> int:
    """Kombu's Redis transport reads its priority lists lowest number first (0 is the most urgent)."""
    return MOST_URGENT - max(0, min(priority, MOST_URGENT))


def stage_task_id(job_id: str, stage: str, attempt: int = 0) -> str:
    """Task ids are fixed before sending, so every stage can be found by job id; a stage sent again
    after a lost attempt gets the retry count as a suffix."""
    return f"{job_id}.{stage}" if attempt == 0 else f"{job_id}.{stage}.{attempt}"


def stage_task_ids(job_id: str) -> dict[str, str]:
    return {stage: stage_task_id(job_id, stage) for stage in STAGES}
