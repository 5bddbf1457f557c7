"""Turning an accepted request into a job record and a Celery chain init → run → eval."""

from __future__ import annotations

import time
import uuid
from typing import Any

import anyio
from fastapi.exceptions import RequestValidationError
from pydantic import ValidationError

from farm import tracing
from farm.handler.registry import UnknownHandler, get_handler
from farm.jobs.dispatch import broker_priority, stage_task_ids
from farm.jobs.messages import StageMessages
from farm.jobs.spec import JobSpec
from farm.jobs.store import AsyncJobStore
from farm.models.unknown_fields import explain_unknown


def new_job_id() -> str:
    return uuid.uuid4().hex


def validate_instance(instance: dict[str, Any], loc: tuple[str, ...] = ("body", "instance")) -> str:
    """Checks the instance against its handler's model; returns the handler name. Raises 422 errors."""
    name = instance.get("handler")
    if not isinstance(name, str) or not name:
        raise RequestValidationError(
            [
                {
                    "type": "missing",
                    "loc": (*loc, "handler"),
                    "msg": "Field required: a registered handler name",
                    "input": instance,
                }
            ]
        )
    try:
        handler = get_handler(name)
    except UnknownHandler as exc:
        raise RequestValidationError(
            [{"type": "value_error", "loc": (*loc, "handler"), "msg": str(exc), "input": name}]
        ) from None
    try:
        handler.validate(instance)
    except ValidationError as exc:
        errors = explain_unknown([dict(e) for e in exc.errors(include_url=False)], handler.instance_model)
        raise RequestValidationError([{**err, "loc": (*loc, *err["loc"])} for err in errors]) from None
    return name


class Submitter:
    def __init__(self, messages: StageMessages, store: AsyncJobStore) -> None:
        self.messages = messages
        self.store = store

    async def submit(self, spec: JobSpec) -> bool:
        """Records the job and enqueues its init stage in one step (each later stage is enqueued by the
        end of the one before); False (and nothing queued) if the id exists."""
        spec.submitted_at = spec.submitted_at or time.time()
        if not self.messages.ready:
            await anyio.to_thread.run_sync(self.messages.open)  # once per process, off the event loop
        ids = stage_task_ids(spec.job_id)
        init = self.messages.build(spec.job_id, "init", ids["init"], "init", broker_priority(spec.priority))
        rollout = tracing.start_rollout(
            spec.job_id, {"farm.handler": spec.handler, "farm.task_id": spec.task_id}
        )
        if rollout is not None:
            _, spec.traceparent, spec.metadata[tracing.TRACE_ID] = rollout
        created = await self.store.create(spec, ids, init)
        if created:
            tracing.end_rollout(rollout)  # a job id that existed keeps its own trace; this span is dropped
        return created
