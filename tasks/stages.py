"""The three Celery stage tasks. Each takes only the job id: everything else is in the job record.

There is no Celery chain: a stage that ends well enqueues the next one in the same Lua call that
records it done (farm/jobs/messages.py), so a message carries one stage and nothing to send after it."""

from __future__ import annotations

from celery import Task

from farm.celery_app import app

# Connected to worker signals on import: the reaper and drain hooks, the init worker's warm pool.
from tasks import host_checks, reaper, warm  # noqa: F401
from tasks.lifecycle import execute_stage


@app.task(name="farm.init", bind=True)
def init_stage(self: Task, job_id: str) -> None:
    execute_stage(job_id, "init", self.request.hostname)


@app.task(name="farm.run", bind=True)
def run_stage(self: Task, job_id: str) -> None:
    execute_stage(job_id, "run", self.request.hostname)


@app.task(name="farm.eval", bind=True)
def eval_stage(self: Task, job_id: str) -> None:
    execute_stage(job_id, "eval", self.request.hostname)
