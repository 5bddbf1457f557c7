"""A small in-memory ASGI app speaking the management and task API of docs/CONTRACT.md, for client tests.

Used until the real facade (`farm/api/`) runs end to end. Jobs are "scripted" by their instance:
- `duration_s` (default 0.05): time a job takes once started;
- `rewards`: reward per sample slot (metadata.sample), else `p`: reward 1.0 with probability p, drawn from
  a hash of the job's group and slot (so a retry of the same slot gets the same reward);
- `fail_attempts`: attempts (metadata.attempt) below this fail with a run-stage error;
- `fail_slots`: sample slots that always fail;
- `fail_type`: the failure class those failures end with (default `ScriptedFailure`);
- `server_wait_s`: a blocking POST /process gives up after this long with 202 (as the API may).
Served by a real uvicorn process (see conftest); `STANDIN_TOKEN` turns on bearer auth.
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import time
from typing import Any

from fastapi import Depends, FastAPI, HTTPException, Request
from fastapi.responses import JSONResponse

from farm.models import (
    AddLLMServerRequest,
    BackendInfo,
    CancelRequest,
    JobResult,
    JobState,
    ProcessRequest,
    StageError,
    SubmitResponse,
    TaskRequest,
    Timings,
    Trace,
    Trajectory,
)


class Farm:
    def __init__(self) -> None:
        self.jobs: dict[str, JobResult] = {}
        self.tasks: dict[str, asyncio.Task[None]] = {}
        self.task_sessions: dict[str, list[str]] = {}
        self.backends: list[BackendInfo] = []
        self.running = True
        self.active = 0
        self.max_active = 0
        self.submitted = 0
        self.cancel_calls = 0


farm = Farm()


def _auth(request: Request) -> None:
    token = os.environ.get("STANDIN_TOKEN")
    if token and request.url.path != "/healthz" and request.headers.get("authorization") != f"Bearer {token}":
        raise HTTPException(401, "missing or wrong bearer token")


app = FastAPI(dependencies=[Depends(_auth)])


def _unit(seed: str) -> float:
    return int.from_bytes(hashlib.sha256(seed.encode()).digest()[:8], "big") / 2**64


def _reward(instance: dict[str, Any], metadata: dict[str, Any], job_id: str) -> float:
    slot = int(metadata.get("sample", 0))
    if "rewards" in instance:
        return float(instance["rewards"][slot % len(instance["rewards"])])
    key = f"{metadata.get('group_id', job_id)}:{slot}"
    return 1.0 if _unit(key) < float(instance.get("p", 0.5)) else 0.0


async def _run(job_id: str, request: ProcessRequest) -> None:
    instance, metadata = request.instance, request.metadata
    job = farm.jobs[job_id]
    farm.active += 1
    farm.max_active = max(farm.max_active, farm.active)
    started = time.monotonic()
    try:
        job.state = JobState.run
        await asyncio.sleep(float(instance.get("duration_s", 0.05)))  # the scenario: a job's duration
        slot = int(metadata.get("sample", 0))
        if int(metadata.get("attempt", 0)) < int(instance.get("fail_attempts", 0)) or slot in instance.get(
            "fail_slots", []
        ):
            job.state = JobState.failed
            kind = str(instance.get("fail_type", "ScriptedFailure"))
            job.error = StageError(stage="run", type=kind, message="scripted to fail")
            return
        reward = _reward(instance, metadata, job_id)
        prompt = [1, 2, 3, 4 + slot]
        trace = Trace(
            prompt_ids=prompt,
            response_ids=[10, 11, 12],
            loss_mask=[1, 0, 1],
            response_logprobs=[-0.5, 0.0, -0.25],
            reward=reward,
            metadata=dict(metadata),
        )
        job.trajectory = Trajectory(traces=[trace])
        job.reward = reward
        job.state = JobState.done
    finally:
        farm.active -= 1
        job.timings = Timings(run=time.monotonic() - started)
        job.metadata = {**job.metadata, "finished_at": time.time()}


def _start_job(request: ProcessRequest, job_id: str) -> JobResult:
    handler = request.instance.get("handler")
    if handler != "scripted":
        raise HTTPException(
            422, [{"loc": ["body", "instance", "handler"], "msg": f"unknown handler {handler!r}"}]
        )
    if job_id in farm.jobs:
        return farm.jobs[job_id]
    job = JobResult(
        job_id=job_id,
        state=JobState.queued,
        handler=handler,
        metadata={**request.metadata, "submitted_at": time.time()},
    )
    farm.jobs[job_id] = job
    farm.submitted += 1
    farm.tasks[job_id] = asyncio.create_task(_run(job_id, request))
    return job


@app.post("/process")
async def process(request: ProcessRequest) -> Any:
    if not farm.running:
        raise HTTPException(503, "farm is stopped")
    job_id = request.job_id or f"job-{farm.submitted}"
    job = _start_job(request, job_id)
    if not request.wait:
        return JSONResponse({"job_id": job_id}, status_code=202)
    # `server_wait_s` mimics the API's own wait limit: past it, 202 with the state so far
    await asyncio.wait([farm.tasks[job_id]], timeout=request.instance.get("server_wait_s"))
    if not job.state.terminal:
        return JSONResponse({"job_id": job_id, "state": job.state.value}, status_code=202)
    return job


@app.get("/jobs/{job_id}")
async def get_job(job_id: str) -> JobResult:
    if job_id not in farm.jobs:
        raise HTTPException(404, f"unknown job {job_id}")
    return farm.jobs[job_id]


def _cancel(job_id: str) -> str:
    job = farm.jobs[job_id]
    if not job.state.terminal:
        farm.tasks[job_id].cancel()
        job.state = JobState.cancelled
    return job.state.value


@app.post("/cancel")
async def cancel(request: CancelRequest) -> dict[str, Any]:
    farm.cancel_calls += 1
    if request.job_id is not None:
        if request.job_id not in farm.jobs:
            raise HTTPException(404, f"unknown job {request.job_id}")
        return {"job_id": request.job_id, "state": _cancel(request.job_id)}
    chosen = [
        job.job_id
        for job in farm.jobs.values()
        if (request.group_id is not None and job.metadata.get("group_id") == request.group_id)
        or (request.task_id is not None and job.job_id in farm.task_sessions.get(request.task_id, []))
        or (
            request.older_than_policy_version is not None
            and job.metadata.get("policy_version", request.older_than_policy_version)
            < request.older_than_policy_version
        )
    ]
    return {"cancelled": [job_id for job_id in chosen if _cancel(job_id) == "cancelled"]}


@app.post("/add_llm_server")
async def add_llm_server(request: AddLLMServerRequest) -> list[BackendInfo]:
    farm.backends.append(BackendInfo(address=request.address, weight=request.weight, kind=request.kind))
    return farm.backends


@app.post("/clear_llm_server")
async def clear_llm_server() -> list[BackendInfo]:
    farm.backends.clear()
    return farm.backends


@app.get("/llm_servers")
async def llm_servers() -> list[BackendInfo]:
    return farm.backends


@app.post("/start")
async def start() -> dict[str, Any]:
    farm.running = True
    return {"running": True}


@app.post("/stop")
async def stop() -> dict[str, Any]:
    farm.running = False
    for job_id in list(farm.jobs):
        _cancel(job_id)
    return {"running": False}


@app.get("/status")
async def status() -> dict[str, Any]:
    states: dict[str, int] = {}
    for job in farm.jobs.values():
        states[job.state.value] = states.get(job.state.value, 0) + 1
    return {"jobs": states, "running": farm.running, "backends": len(farm.backends)}


@app.post("/rollout/task/submit")
async def submit_task(task: TaskRequest) -> SubmitResponse:
    ids = [f"{task.task_id}-{i}" for i in range(task.num_samples)]
    instance = {"handler": "scripted", **(task.instance or {})}
    for i, session_id in enumerate(ids):
        _start_job(ProcessRequest(instance=instance, metadata={**task.metadata, "sample": i}), session_id)
    farm.task_sessions[task.task_id] = ids
    return SubmitResponse(task_id=task.task_id, session_ids=ids)


@app.get("/rollout/task/{task_id}")
async def get_task(task_id: str) -> dict[str, Any]:
    if task_id not in farm.task_sessions:
        raise HTTPException(404, f"unknown task {task_id}")
    sessions = [farm.jobs[s] for s in farm.task_sessions[task_id]]
    return {
        "task_id": task_id,
        "state": "completed" if all(s.state.terminal for s in sessions) else "running",
        "sessions": [
            {"session_id": s.job_id, "state": s.state, "result": s if s.state.terminal else None}
            for s in sessions
        ],
    }


@app.get("/healthz")
async def healthz() -> dict[str, bool]:
    return {"ok": True}


@app.get("/standin/stats")
async def stats() -> dict[str, int]:
    return {
        "max_active": farm.max_active,
        "active": farm.active,
        "submitted": farm.submitted,
        "cancel_calls": farm.cancel_calls,
    }


@app.post("/standin/reset")
async def reset() -> dict[str, bool]:
    for task in farm.tasks.values():
        task.cancel()
    farm.__init__()  # type: ignore[misc]
    return {"ok": True}
