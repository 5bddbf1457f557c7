"""Management API (ProRL-compatible): process, jobs, cancel, backends, start/stop, status, health."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Response
from fastapi.responses import JSONResponse

from farm.api.backend_health import probe_and_record
from farm.api.cancel import cancel_jobs, resolve_targets
from farm.api.state import FarmState, farm_state
from farm.api.submit import new_job_id, validate_instance
from farm.api.url_allow import check_url
from farm.jobs.spec import JobSpec
from farm.jobs.store import JobRecord
from farm.models.backends import BackendInfo
from farm.models.requests import (
    AddLLMServerRequest,
    CancelRequest,
    ProcessRequest,
    RemoveLLMServerRequest,
)
from farm.models.results import JobResult
from farm.pool import normalise_address
from farm.status import farm_status
from farm.web.responses import errors
from farm.web.security import require_token

log = logging.getLogger(__name__)
router = APIRouter(dependencies=[Depends(require_token)], responses=errors(401, 413))
health_router = APIRouter()


async def ensure_accepting(farm: FarmState) -> None:
    if not await farm.accepting():
        raise HTTPException(status_code=503, detail="the farm is stopped; POST /start to accept work")


def job_response(record: JobRecord) -> Response:
    return Response(record.snapshot_json(), media_type="application/json")


@router.post(
    "/process",
    response_model=JobResult,
    responses={
        202: {"description": "wait=false: the job id; the result comes from GET /jobs/{job_id}"},
        **errors(400, 503),
    },
)
async def process(body: ProcessRequest, farm: FarmState = Depends(farm_state)) -> Any:
    """Run one rollout. wait=true answers with the final JobResult; wait=false answers 202 at once."""
    handler = validate_instance(body.instance)
    if body.callback_url is not None:
        await check_url(farm.callback_urls, body.callback_url, ("body", "callback_url"))
    await ensure_accepting(farm)
    spec = JobSpec(
        job_id=body.job_id or new_job_id(),
        handler=handler,
        instance=body.instance,
        sampling_params=body.sampling_params,
        timeout_s=body.timeout_s or farm.settings.default_timeout_s,
        metadata=body.metadata,
        callback_url=body.callback_url,
        priority=body.priority,
    )
    if not body.wait:
        await farm.submitter.submit(spec)  # an existing job id is not queued again
        return JSONResponse({"job_id": spec.job_id}, status_code=202)
    with farm.waiter.watch(spec.job_id) as watch:
        created = await farm.submitter.submit(spec)
        peek = await watch.result(farm.settings.process_wait_s, just_created=created)
    if peek is None:
        raise HTTPException(status_code=404, detail=f"job {spec.job_id} expired")
    if peek.result_json is None:
        return JSONResponse({"job_id": spec.job_id, "state": peek.state.value}, status_code=202)
    return Response(peek.result_json, media_type="application/json")


@router.get("/jobs/{job_id}", response_model=JobResult, responses=errors(404))
async def get_job(job_id: str, farm: FarmState = Depends(farm_state)) -> Response:
    record = await farm.store.get(job_id)
    if record is None:
        raise HTTPException(status_code=404, detail=f"unknown job {job_id}")
    return job_response(record)


@router.post("/cancel", responses=errors(404))
async def cancel(body: CancelRequest, farm: FarmState = Depends(farm_state)) -> dict[str, Any]:
    """Idempotent. By job, task, group_id, or every active job older than a policy version."""
    targets = await resolve_targets(farm, body)
    if body.job_id is not None and not targets:
        raise HTTPException(status_code=404, detail=f"unknown job {body.job_id}")
    states = await cancel_jobs(farm, targets)
    if body.job_id is not None and len(states) == 1:
        return {"job_id": body.job_id, "state": states[body.job_id]}
    return {"cancelled": sorted(states), "states": states, "count": len(states)}


@router.post("/add_llm_server", response_model=list[BackendInfo])
async def add_llm_server(
    body: AddLLMServerRequest, farm: FarmState = Depends(farm_state)
) -> list[BackendInfo]:
    """The address must be http(s) and inside FARM_BACKEND_ALLOW (default: loopback and private
    networks); redirects from it are never followed. The backend is probed before the answer (GET
    /health and <address>/models, 3 s at most): one that does not answer is registered but listed
    `"healthy": false` with the reason in `error`, and taken into rotation once it answers."""
    await check_url(farm.backend_urls, body.address, ("body", "address"))
    await farm.pool.add(
        body.address,
        weight=body.weight,
        kind=body.kind,
        policy_version=body.policy_version,
        tool_call_parser=body.tool_call_parser,
    )
    return await probe_and_record(farm.pool, normalise_address(body.address))


@router.post("/remove_llm_server", response_model=list[BackendInfo], responses=errors(404))
async def remove_llm_server(
    body: RemoveLLMServerRequest, farm: FarmState = Depends(farm_state)
) -> list[BackendInfo]:
    """One backend out of the pool (a server going down for a swap); the rest keep serving."""
    if not await farm.pool.remove(body.address):
        raise HTTPException(status_code=404, detail=f"no backend registered at {body.address}")
    return await farm.pool.list()


@router.post("/clear_llm_server", response_model=list[BackendInfo])
async def clear_llm_server(farm: FarmState = Depends(farm_state)) -> list[BackendInfo]:
    return await farm.pool.clear()


@router.get("/llm_servers", response_model=list[BackendInfo])
async def llm_servers(farm: FarmState = Depends(farm_state)) -> list[BackendInfo]:
    return await farm.pool.list()


@router.post("/start")
async def start(farm: FarmState = Depends(farm_state)) -> dict[str, Any]:
    await farm.set_accepting(True)
    return {"accepting": True}


@router.post("/stop")
async def stop(farm: FarmState = Depends(farm_state)) -> dict[str, Any]:
    """Refuse new work (503) until /start, and cancel every job in flight (their sandboxes stop)."""
    await farm.set_accepting(False)
    states = await cancel_jobs(farm, await farm.store.active_ids())
    return {"accepting": False, "cancelled": len(states)}


@router.get("/status")
async def status(farm: FarmState = Depends(farm_state)) -> dict[str, Any]:
    return await farm_status(farm)


HEALTH_TIMEOUT_S = 0.8


@health_router.get("/healthz")
async def healthz(farm: FarmState = Depends(farm_state)) -> Response:
    try:
        # The client retries a lost connection with backoff (seconds); a health probe must not wait for it.
        async with asyncio.timeout(HEALTH_TIMEOUT_S):
            await farm.redis.ping()
    except TimeoutError:
        return JSONResponse({"ok": False, "redis": "no answer within 0.8 s"}, status_code=503)
    except Exception as exc:
        return JSONResponse({"ok": False, "redis": str(exc)}, status_code=503)
    return JSONResponse({"ok": True})
