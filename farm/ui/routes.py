"""HTML pages and the JSON they poll, under /ui. Reads use the API's own functions; actions are made by the
pages' JavaScript against the API's endpoints (/cancel, /add_llm_server, /remove_llm_server)."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends, HTTPException, Query, Request
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates

from farm.ui.auth import require_ui_page, require_ui_token
from farm.ui.groups import group_view
from farm.ui.job_pages import JobFilter, JobPage, job_page
from farm.ui.live import live_snapshot
from farm.ui.runs import BOTTOM, HEIGHT, LEFT, RIGHT, TOP, WIDTH, list_runs, run_view, runs_dir
from farm.ui.trajectory import (
    LONG_CHARS,
    LONG_LINES,
    LONG_TOKENS,
    OPEN_TOKEN_VIEWS,
    PREVIEW_TOKENS,
    TraceTokens,
    decoder,
    fold,
    job_view,
    load_result,
    message_text,
    pending_view,
    trace_tokens,
)
from farm.web.shared_state import SharedState, shared_state

HERE = Path(__file__).parent
templates = Jinja2Templates(directory=HERE / "templates")
# Every template is HTML, but named *.html.j2, which Jinja's default (by extension) does not escape:
# tool output and model text from a job would be the page's markup (a sandbox printing <script>).
templates.env.autoescape = True
templates.env.filters["fold"] = fold
templates.env.filters["message_text"] = message_text
templates.env.globals.update(
    OPEN_TOKEN_VIEWS=OPEN_TOKEN_VIEWS,
    LONG_LINES=LONG_LINES,
    LONG_CHARS=LONG_CHARS,
    LONG_TOKENS=LONG_TOKENS,
    PREVIEW_TOKENS=PREVIEW_TOKENS,
    CHART={
        "width": WIDTH,
        "height": HEIGHT,
        "left": LEFT,
        "right": WIDTH - RIGHT,
        "top": TOP,
        "bottom": HEIGHT - BOTTOM,
    },
)
static_files = StaticFiles(directory=HERE / "static")

pages = APIRouter(prefix="/ui", dependencies=[Depends(require_ui_page)], include_in_schema=False)
data = APIRouter(prefix="/ui/api", dependencies=[Depends(require_ui_token)], include_in_schema=False)
public = APIRouter(prefix="/ui", include_in_schema=False)
_warming: set[asyncio.Task[Any]] = set()


def page(request: Request, name: str, **context: Any) -> HTMLResponse:
    return templates.TemplateResponse(request, name, {"active": name.split(".")[0], **context})


@public.get("/login")
async def login(request: Request, next: str = "/ui/") -> HTMLResponse:
    safe_next = next if next.startswith("/ui") else "/ui/"
    return page(request, "login.html.j2", next=safe_next)


@pages.get("/")
async def live_page(request: Request) -> HTMLResponse:
    return page(request, "live.html.j2")


@data.get("/live")
async def live_data(farm: SharedState = Depends(shared_state)) -> dict[str, Any]:
    return await live_snapshot(farm)


def _filter(
    state: str | None = None,
    handler: str | None = None,
    task: str | None = None,
    group: str | None = None,
    policy_version: str | None = None,
    min_reward: str | None = None,
    max_reward: str | None = None,
    min_duration: str | None = None,
) -> JobFilter:
    """Query parameters of the filter form (empty fields mean no filter)."""
    raw = {
        "state": state,
        "handler": handler,
        "task": task,
        "group": group,
        "policy_version": policy_version,
        "min_reward": min_reward,
        "max_reward": max_reward,
        "min_duration": min_duration,
    }
    return JobFilter.model_validate({k: v.strip() for k, v in raw.items() if v and v.strip()})


@pages.get("/jobs")
async def jobs_page(
    request: Request,
    flt: JobFilter = Depends(_filter),
    cursor: float | None = None,
    size: int = Query(50, ge=1, le=500),
    farm: SharedState = Depends(shared_state),
) -> HTMLResponse:
    result = await job_page(farm.store.index, flt, size, cursor)
    query = {k: v for k, v in request.query_params.items() if k != "cursor"}
    return page(request, "jobs.html.j2", page=result, flt=flt, query=query, cursor=cursor)


@data.get("/jobs", response_model=JobPage)
async def jobs_data(
    flt: JobFilter = Depends(_filter),
    cursor: float | None = None,
    size: int = Query(50, ge=1, le=500),
    farm: SharedState = Depends(shared_state),
) -> JobPage:
    return await job_page(farm.store.index, flt, size, cursor)


@pages.get("/groups/{group_id}")
async def group_page(
    request: Request, group_id: str, farm: SharedState = Depends(shared_state)
) -> HTMLResponse:
    return page(request, "group.html.j2", group=await group_view(farm, group_id))


@pages.get("/jobs/{job_id}")
async def job_page_view(
    request: Request, job_id: str, farm: SharedState = Depends(shared_state)
) -> HTMLResponse:
    result = await load_result(farm.store, job_id)
    view = job_view(result) if result else await pending_view(farm.store, job_id)
    if result and result.trajectory.traces:
        # load the tokenizer while the reader looks at the header, before they open the tokens
        _warming.add(asyncio.create_task(asyncio.to_thread(decoder, result.trajectory.traces[0])))
        _warming.difference_update({t for t in _warming if t.done()})
    if view is None:
        raise HTTPException(status_code=404, detail=f"job_id {job_id!r}: no such job")
    return page(request, "job.html.j2", job=view)


@data.get("/jobs/{job_id}/traces/{index}", response_model=TraceTokens)
async def trace_data(job_id: str, index: int, farm: SharedState = Depends(shared_state)) -> TraceTokens:
    result = await load_result(farm.store, job_id)
    if result is None:
        raise HTTPException(status_code=404, detail=f"job_id {job_id!r}: no finished result")
    traces = result.trajectory.traces
    if not 0 <= index < len(traces):
        raise HTTPException(
            status_code=422, detail=f"index: {index} out of range (job has {len(traces)} traces)"
        )
    # decoding 30k tokens (and loading the tokenizer the first time) must not block the event loop
    return await asyncio.to_thread(trace_tokens, index, traces[index])


@pages.get("/runs")
async def runs_page(request: Request, run: list[str] = Query(default_factory=list)) -> HTMLResponse:
    """The runs directory's files; `?run=A&run=B` shows up to two of them side by side."""
    if len(run) > 2:
        raise HTTPException(status_code=422, detail="run: at most two run files side by side")
    views = [run_view(name) for name in run]
    return page(request, "runs.html.j2", files=list_runs(), root=runs_dir(), views=views, chosen=run)
