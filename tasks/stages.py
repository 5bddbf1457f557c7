"""The three Celery stage tasks. Each takes only the job id: everything else is in the job record."""

from __future__ import annotations

from celery import Task

import tasks.reaper  # noqa: F401  (connects the reaper and drain hooks to worker signals)
from farm.celery_app import app
from tasks.lifecycle import StageOutcome, execute_stage


def _stage(task: Task, job_id: str, stage: str) -> None:
    if execute_stage(job_id, stage, task.request.hostname) == StageOutcome.STOP:
        task.request.chain = None  # the job has ended or another attempt carries it: send nothing more


@app.task(name="farm.init", bind=True)
def init_stage(self: Task, job_id: str) -> None:
    _stage(self, job_id, "init")


@app.task(name="farm.run", bind=True)
def run_stage(self: Task, job_id: str) -> None:
    _stage(self, job_id, "run")


@app.task(name="farm.eval", bind=True)
def eval_stage(self: Task, job_id: str) -> None:
    _stage(self, job_id, "eval")
