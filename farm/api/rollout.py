"""Task API (POLAR-compatible): a task fans out into `num_samples` sessions, each one farm job."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from fastapi import APIRouter, Depends, HTTPException
from fastapi.exceptions import RequestValidationError

from farm.api.management import ensure_accepting
from farm.api.state import FarmState, farm_state
from farm.api.submit import validate_instance
from farm.api.url_allow import check_url
from farm.handler.registry import UnknownHandler, get_handler
from farm.jobs.spec import JobSpec, session_id
from farm.models.requests import SamplingParams
from farm.models.results import JobState
from farm.models.tasks import SessionStatus, SubmitResponse, TaskRequest, TaskStatus
from farm.models.unknown_fields import declared_names
from farm.web.responses import errors
from farm.web.security import require_token
from farm.workers import live_workers_async

router = APIRouter(prefix="/rollout", dependencies=[Depends(require_token)], responses=errors(401, 413))


def task_instance(body: TaskRequest) -> dict[str, Any]:
    """The handler instance a task's sessions run, from `instance`, `instruction` and `agent`."""
    if body.agent.harness is not None:
        instance = dict(body.instance or {})
        instance.setdefault("handler", "harness")
        if body.instruction is not None:
            instance.setdefault("instruction", body.instruction)
        instance.setdefault("harness", body.agent.harness)
        for name in ("command", "model_name"):
            if getattr(body.agent, name) is not None:
                instance.setdefault(name, getattr(body.agent, name))
        return instance
    instance = dict(body.instance or {})
    if body.agent.handler is not None:
        instance["handler"] = body.agent.handler
    if body.instruction is not None and _reads_instruction(instance.get("handler")):
        instance.setdefault("instruction", body.instruction)
    return instance


def _reads_instruction(name: Any) -> bool:
    """Whether the handler's instances take `instruction` (an unknown one is judged by validation later);
    a handler whose instances do not (noop, math) is not handed a field it would refuse."""
    try:
        model = get_handler(name).instance_model if isinstance(name, str) else None
    except UnknownHandler:
        return True
    return (
        model is None or "instruction" in declared_names(model) or model.model_config.get("extra") == "allow"
    )


def validate_harness_task(body: TaskRequest, instance: dict[str, Any]) -> None:
    """The task-level parts a harness job reads at init (runtime.prepare, evaluator, the shell command)
    are checked now, so a mistake is a 422 naming the task's field instead of a failed job later."""
    if instance.get("harness") == "shell" and not instance.get("command"):
        raise RequestValidationError(
            [
                {
                    "type": "missing",
                    "loc": ("body", "agent", "command"),
                    "msg": "the shell harness needs agent.command (or instance.command)",
                    "input": None,
                }
            ]
        )
    probe = {**instance, "prepare": body.runtime.prepare}
    if body.evaluator.strategy:
        probe["evaluator"] = body.evaluator.model_dump()
    where = {"prepare": ("body", "runtime", "prepare"), "evaluator": ("body", "evaluator")}
    try:
        validate_instance(probe, loc=("body", "instance"))
    except RequestValidationError as exc:
        errors = []
        for err in exc.errors():
            field = err["loc"][2] if len(err["loc"]) > 2 else None
            if field in where:
                err = {**err, "loc": (*where[field], *err["loc"][3:])}
            errors.append(err)
        raise RequestValidationError(errors) from None


SUBMIT_CONCURRENCY = 64
"""Sessions created at once: one Redis round trip each, overlapped."""


def _checked(body: TaskRequest) -> tuple[dict[str, Any], str]:
    """The sessions' handler instance and handler name; 422 naming the task's field when invalid."""
    instance = task_instance(body)
    loc = ("body", "agent", "harness") if body.agent.harness else ("body", "instance")
    try:
        handler = validate_instance(instance, loc=("body", "instance"))
    except RequestValidationError as exc:
        if body.agent.harness and instance.get("handler") == "harness":
            raise RequestValidationError(
                [{**e, "loc": loc} if e["loc"][-1] == "handler" else e for e in exc.errors()]
            ) from None
        raise
    if body.agent.harness and instance.get("handler") == "harness":
        validate_harness_task(body, instance)
    return instance, handler


@router.post("/task/submit", response_model=SubmitResponse, responses=errors(400, 503))
async def submit_task(body: TaskRequest, farm: FarmState = Depends(farm_state)) -> SubmitResponse:
    """Idempotent and completable: re-submitting a task id answers with its sessions, and if the first
    submission died part-way (an API crash in the middle of 1024 sessions), creates the missing ones
    from the request first stored. A task reads `completed` only after every session was created."""
    _checked(body)
    if body.callback_url is not None:
        await check_url(farm.callback_urls, body.callback_url, ("body", "callback_url"))
    await ensure_accepting(farm)
    ids = [session_id(body.task_id, i) for i in range(body.num_samples)]
    ttl_s = farm.settings.result_ttl_s
    if not await farm.tasks.claim(body.task_id, body.model_dump_json(), ids, time.time(), ttl_s):
        stored = await farm.tasks.stored(body.task_id)
        if stored.request is None:  # expired between the two calls: too late to complete; ask again
            raise HTTPException(status_code=409, detail=f"task {body.task_id} expired; submit it again")
        body = TaskRequest.model_validate_json(stored.request)  # the request first stored is what runs
        ids = [session_id(body.task_id, i) for i in range(body.num_samples)]
        if stored.submitted:
            return SubmitResponse(task_id=body.task_id, session_ids=ids)
    await _create_sessions(farm, body, ids)
    await farm.tasks.mark_submitted(body.task_id)
    return SubmitResponse(task_id=body.task_id, session_ids=ids)


async def _create_sessions(farm: FarmState, body: TaskRequest, ids: list[str]) -> None:
    """Creates each session that does not exist yet (Submitter.submit is a no-op for one that does)."""
    instance, handler = _checked(body)
    sampling = SamplingParams.model_validate(body.sampling_params)
    metadata = {"group_id": body.task_id, **body.metadata, "task_id": body.task_id}
    shared = {
        "handler": handler,
        "instance": instance,
        "sampling_params": sampling,
        "timeout_s": body.timeout_seconds,
        "task_id": body.task_id,
        "runtime": body.runtime.model_dump(),
        "agent": body.agent.model_dump(),
        "builder": body.builder.model_dump(),
        "evaluator": body.evaluator.model_dump(),
        "callback_url": body.callback_url,
        "priority": body.priority,
    }
    for start in range(0, len(ids), SUBMIT_CONCURRENCY):
        batch = list(enumerate(ids))[start : start + SUBMIT_CONCURRENCY]
        await asyncio.gather(
            *(
                farm.submitter.submit(
                    JobSpec(job_id=job_id, metadata={**metadata, "sample_index": i}, sample_index=i, **shared)
                )
                for i, job_id in batch
            )
        )


@router.get("/task/{task_id}", response_model=TaskStatus, responses=errors(404))
async def get_task(task_id: str, farm: FarmState = Depends(farm_state)) -> TaskStatus:
    found = await farm.tasks.sessions(task_id)
    if found is None:
        raise HTTPException(status_code=404, detail=f"unknown task {task_id}")
    ids, submitted = found
    sessions = []
    for job_id, record in zip(ids, await farm.store.get_many(ids), strict=True):
        if record is None:
            continue
        terminal = record.state.terminal
        sessions.append(
            SessionStatus(session_id=job_id, state=record.state, result=record.result if terminal else None)
        )
    if not submitted and len(sessions) < len(ids):
        # Some sessions do not exist yet: being created now, or the submission died part-way (submit
        # the task again to complete it). Never `completed` with sessions missing.
        return TaskStatus(task_id=task_id, state="submitting", sessions=sessions)
    done = all(s.state.terminal for s in sessions)
    return TaskStatus(task_id=task_id, state="completed" if done else "running", sessions=sessions)


@router.get("/status")
async def rollout_status(farm: FarmState = Depends(farm_state)) -> dict[str, Any]:
    workers = await live_workers_async(farm.redis)
    nodes: dict[str, list[str]] = {}
    for w in workers:
        nodes.setdefault(w.get("node", "?"), []).append(w.get("hostname", "?"))
    counts = await farm.store.counts_by_state()
    return {
        "tasks": await farm.tasks.count(),
        "sessions": counts,
        "running_sessions": sum(n for s, n in counts.items() if not JobState(s).terminal),
        "nodes": {node: sorted(names) for node, names in sorted(nodes.items())},
    }
