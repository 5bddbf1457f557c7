"""Turning an accepted request into a job record and a Celery chain init → run → eval."""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

import anyio
from celery import Celery
from fastapi.exceptions import RequestValidationError
from kombu.exceptions import OperationalError
from pydantic import ValidationError
from redis.exceptions import RedisError

from farm.jobs.dispatch import send_stages, stage_task_ids
from farm.jobs.spec import JobSpec
from farm.jobs.store import AsyncJobStore
from handlers.registry import UnknownHandler, get_handler

log = logging.getLogger(__name__)


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
        raise RequestValidationError(
            [{**err, "loc": (*loc, *err["loc"])} for err in exc.errors(include_url=False)]
        ) from None
    return name


class Submitter:
    def __init__(self, celery: Celery, store: AsyncJobStore) -> None:
        self.celery = celery
        self.store = store

    async def submit(self, spec: JobSpec) -> bool:
        """Creates the job and enqueues its chain; False (and nothing queued) if the id exists."""
        spec.submitted_at = spec.submitted_at or time.time()
        ids = stage_task_ids(spec.job_id)
        if not await self.store.create(spec, ids):
            return False
        try:
            await anyio.to_thread.run_sync(send_stages, self.celery, spec.job_id, ids, None, spec.priority)
        except (OperationalError, RedisError):
            # Recorded but not sent (Redis went away past the publish retries): the stall sweep sends
            # it once the broker is back, so the job is accepted all the same.
            log.warning("could not send job %s yet; the stall sweep will", spec.job_id, exc_info=True)
        return True
