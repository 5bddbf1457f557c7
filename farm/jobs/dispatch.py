"""Sending a job's stages as a Celery chain. Used at submit time (all three stages) and to resume a
job whose stage was lost or given back (the remaining stages, possibly to a given run queue)."""

from __future__ import annotations

from celery import Celery

from farm.models.results import STAGES

MOST_URGENT = 9
"""Job priorities run from 0 (normal) to 9; init takes the most urgent waiting job first."""


def broker_priority(priority: int) -> int:
    """Kombu's Redis transport reads its priority lists lowest number first (0 is the most urgent)."""
    return MOST_URGENT - max(0, min(priority, MOST_URGENT))


def stage_task_ids(job_id: str, stages: tuple[str, ...] = STAGES, attempt: int = 0) -> dict[str, str]:
    """Task ids are fixed before sending, so every stage of a chain can be found by job id."""
    suffix = "" if attempt == 0 else f".{attempt}"
    return {stage: f"{job_id}.{stage}{suffix}" for stage in stages}


def send_stages(
    celery: Celery,
    job_id: str,
    task_ids: dict[str, str],
    run_queue: str | None = None,
    priority: int | None = None,
) -> None:
    """Publishes the first stage with the rest embedded as its chain (what `celery.chain` sends, without
    building the canvas: this is on the API's hot path). Later stages are routed when the worker that
    finishes a stage sends the next, unless `run_queue` pins the run stage."""
    signatures = []
    for stage, task_id in task_ids.items():
        sig = celery.signature(f"farm.{stage}", args=(job_id,), immutable=True).set(task_id=task_id)
        if stage == "run" and run_queue:
            sig.set(queue=run_queue)
        signatures.append(sig)
    first, rest = signatures[0], signatures[1:]
    options: dict[str, object] = dict(first.options)
    if first.task == "farm.init" and priority is not None:
        options["priority"] = broker_priority(priority)
    if rest:
        options["chain"] = [dict(sig) for sig in reversed(rest)]  # Celery pops the chain from its end
    celery.send_task(first.task, args=first.args, **options)
