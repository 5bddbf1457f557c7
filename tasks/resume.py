"""Sending a job's remaining stages again after its stage was lost (worker killed: the reaper) or
given back (worker shutting down). Counted as infrastructure retries, bounded per job."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from farm import keys
from farm.jobs.dispatch import MOST_URGENT, send_stages, stage_task_ids
from farm.jobs.store import JobStore, terminal_result
from farm.models.results import STAGES, JobState, StageError
from farm.workers import live_run_queues
from handlers.registry import get_handler

if TYPE_CHECKING:
    from tasks.lifecycle import Attempt

log = logging.getLogger(__name__)
MAX_INFRA_RETRIES = 3


def resume_stages(attempt: Attempt, restart_from_init: bool) -> None:
    """Give this attempt's stage back and send it (or the job from init) again."""
    retries = attempt.store.release(attempt.job_id, attempt.token, restart_from_init)
    if retries:
        resend(attempt.store, attempt.job_id, "init" if restart_from_init else attempt.stage, retries, "")


def resend(store: JobStore, job_id: str, stage: str, retries: int, node: str) -> None:
    from farm.celery_app import app

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
    run_queue = None
    if stage == "run":
        local = f"run.{node}" if node else ""
        if not get_handler(record.spec.handler).node_local:
            run_queue = "run"
        elif local and local in live_run_queues():
            run_queue = local
        else:  # what init made lives on a node without a live run worker: start over
            store.drop_ready_slot(job_id)
            store.r.hdel(keys.job(job_id), "done:init", "init_state", "node")
            stage = "init"
    stages = STAGES[STAGES.index(stage) :]
    log.warning("re-sending %s of job %s (infra retry %d)", "/".join(stages), job_id, retries)
    ids = stage_task_ids(job_id, stages, attempt=retries)
    send_stages(app, job_id, ids, run_queue=run_queue, priority=MOST_URGENT)
