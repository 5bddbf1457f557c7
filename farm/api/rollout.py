"""Task API (POLAR-compatible): a task fans out into `num_samples` sessions, each one farm job."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from fastapi import APIRouter, Depends, HTTPException

from farm.api.groups import settle
from farm.api.management import ensure_accepting
from farm.api.state import FarmState, farm_state
from farm.api.task_sessions import checked, session_spec, task_instance, validate_harness_task
from farm.api.url_allow import check_url
from farm.jobs.spec import session_id
from farm.models.results import JobState
from farm.models.tasks import SessionStatus, SubmitResponse, TaskRequest, TaskStatus
from farm.web.responses import errors
from farm.web.security import require_token
from farm.workers import live_workers_async

__all__ = ["router", "task_instance", "validate_harness_task"]

SUBMIT_CONCURRENCY = 64
"""Sessions created at once: one Redis round trip each, overlapped."""

router = APIRouter(prefix="/rollout", dependencies=[Depends(require_token)], responses=errors(401, 413))


@router.post("/task/submit", response_model=SubmitResponse, responses=errors(400, 503))
async def submit_task(body: TaskRequest, farm: FarmState = Depends(farm_state)) -> SubmitResponse:
    """Idempotent and completable: re-submitting a task id answers with its sessions, and if the first
    submission died part-way (an API crash in the middle of 1024 sessions), creates the missing ones
    from the request first stored. A task reads `completed` only after every session was created."""
    checked(body)
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
    if body.is_group:  # first: the settler skips it until submitted, and it is settled even after a crash
        await farm.tasks.open_group(body.task_id, time.time())
    await _create_sessions(farm, body, ids)
    await farm.tasks.mark_submitted(body.task_id)
    return SubmitResponse(task_id=body.task_id, session_ids=ids)


async def _create_sessions(farm: FarmState, body: TaskRequest, ids: list[str]) -> None:
    """Creates each session that does not exist yet (Submitter.submit is a no-op for one that does)."""
    instance, handler = checked(body)
    for start in range(0, len(ids), SUBMIT_CONCURRENCY):
        batch = list(enumerate(ids))[start : start + SUBMIT_CONCURRENCY]
        await asyncio.gather(
            *(farm.submitter.submit(session_spec(body, instance, handler, i, job_id)) for i, job_id in batch)
        )


@router.get("/task/{task_id}", response_model=TaskStatus, responses=errors(404))
async def get_task(task_id: str, farm: FarmState = Depends(farm_state)) -> TaskStatus:
    found = await farm.tasks.sessions(task_id)
    if found is None:
        raise HTTPException(status_code=404, detail=f"unknown task {task_id}")
    ids, submitted = found
    stored = await farm.tasks.stored(task_id)
    body = None if stored.request is None else TaskRequest.model_validate_json(stored.request)
    if submitted and body is not None and body.is_group:
        settled = await settle(farm, body)
        state = "completed" if settled.terminal else "running"
        return TaskStatus(task_id=task_id, state=state, sessions=settled.sessions, group=settled.group)
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
