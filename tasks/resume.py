"""Sending a job's stage again after it was lost (worker killed: the reaper) or given back (worker
shutting down). Counted as infrastructure retries, bounded per job. The stages after it follow as
usual: each stage's end enqueues the next."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from farm.handler.registry import get_handler
from farm.jobs.dispatch import MOST_URGENT, broker_priority, stage_task_id
from farm.jobs.store import JobStore, terminal_result
from farm.models.results import JobState, StageError
from farm.workers import live_run_queues
from tasks.services import stage_messages

if TYPE_CHECKING:
    from tasks.holder import StageHolder

log = logging.getLogger(__name__)
MAX_INFRA_RETRIES = 3


def resume_stages(attempt: StageHolder, restart_from_init: bool) -> None:
    """Give this attempt's stage back and send it (or the job from init) again."""
    retries = attempt.store.release(attempt.job_id, attempt.token, restart_from_init)
    if retries:
        resend(attempt.store, attempt.job_id, "init" if restart_from_init else attempt.stage, retries, "")


def resend(store: JobStore, job_id: str, stage: str, retries: int, node: str) -> None:
    record = store.get(job_id)
    if record is None or record.state.terminal:
        return
    if retries > MAX_INFRA_RETRIES:
        error = StageError(
            stage=stage,
            type="WorkerLost",
            message=f"the {stage} stage was lost {retries} times (workers died or shut down)",
        )
        store.finalize(terminal_result(record, JobState.failed, error))
        return
    queue = stage
    if stage == "run" and get_handler(record.spec.handler).node_local:
        local = f"run.{node}" if node else ""
        if local and local in live_run_queues():
            queue = local
        else:  # what init made lives on a node without a live run worker: start over
            store.forget_init(job_id)
            stage = queue = "init"
    log.warning("re-sending %s of job %s (infra retry %d)", stage, job_id, retries)
    task_id = stage_task_id(job_id, stage, attempt=retries)
    store.enqueue(stage_messages().build(job_id, stage, task_id, queue, broker_priority(MOST_URGENT)))
