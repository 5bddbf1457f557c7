"""Task API (POLAR-compatible): a task fans out into `num_samples` sessions, each one farm job."""

from __future__ import annotations

import json
import time
from typing import Any

from fastapi import APIRouter, Depends, HTTPException
from fastapi.exceptions import RequestValidationError

from farm import keys
from farm.api.management import ensure_accepting
from farm.api.responses import errors
from farm.api.security import require_token
from farm.api.state import FarmState, farm_state
from farm.api.submit import validate_instance
from farm.api.url_policy import check_url
from farm.jobs.spec import JobSpec, session_id
from farm.models.requests import SamplingParams
from farm.models.results import JobState
from farm.models.tasks import SessionStatus, SubmitResponse, TaskRequest, TaskStatus
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
    if body.instruction is not None:
        instance.setdefault("instruction", body.instruction)
    return instance


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


@router.post("/task/submit", response_model=SubmitResponse, responses=errors(400, 503))
async def submit_task(body: TaskRequest, farm: FarmState = Depends(farm_state)) -> SubmitResponse:
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
    if body.callback_url is not None:
        await check_url(farm.callback_urls, body.callback_url, ("body", "callback_url"))
    await ensure_accepting(farm)
    sampling = SamplingParams.model_validate(body.sampling_params)
    ids = [session_id(body.task_id, i) for i in range(body.num_samples)]
    record = {
        "request": body.model_dump_json(),
        "session_ids": json.dumps(ids),
        "created_at": str(time.time()),
    }
    if not await farm.redis.hsetnx(keys.task(body.task_id), "request", record["request"]):
        raw = await farm.redis.hget(keys.task(body.task_id), "session_ids")
        return SubmitResponse(task_id=body.task_id, session_ids=json.loads(raw) if raw else ids)
    await farm.redis.hset(keys.task(body.task_id), mapping=record)
    await farm.redis.expire(keys.task(body.task_id), farm.settings.result_ttl_s)
    await farm.redis.zadd(keys.TASKS, {body.task_id: time.time()})
    metadata = {"group_id": body.task_id, **body.metadata, "task_id": body.task_id}
    for index, job_id in enumerate(ids):
        await farm.submitter.submit(
            JobSpec(
                job_id=job_id,
                handler=handler,
                instance=instance,
                sampling_params=sampling,
                timeout_s=body.timeout_seconds,
                metadata={**metadata, "sample_index": index},
                task_id=body.task_id,
                sample_index=index,
                runtime=body.runtime.model_dump(),
                agent=body.agent.model_dump(),
                builder=body.builder.model_dump(),
                evaluator=body.evaluator.model_dump(),
                callback_url=body.callback_url,
                priority=body.priority,
            )
        )
    return SubmitResponse(task_id=body.task_id, session_ids=ids)


@router.get("/task/{task_id}", response_model=TaskStatus, responses=errors(404))
async def get_task(task_id: str, farm: FarmState = Depends(farm_state)) -> TaskStatus:
    raw = await farm.redis.hget(keys.task(task_id), "session_ids")
    if raw is None:
        raise HTTPException(status_code=404, detail=f"unknown task {task_id}")
    ids: list[str] = json.loads(raw)
    sessions = []
    for job_id, record in zip(ids, await farm.store.get_many(ids), strict=True):
        if record is None:
            continue
        terminal = record.state.terminal
        sessions.append(
            SessionStatus(session_id=job_id, state=record.state, result=record.result if terminal else None)
        )
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
        "tasks": await farm.redis.zcard(keys.TASKS),
        "sessions": counts,
        "running_sessions": sum(n for s, n in counts.items() if not JobState(s).terminal),
        "nodes": {node: sorted(names) for node, names in sorted(nodes.items())},
    }
