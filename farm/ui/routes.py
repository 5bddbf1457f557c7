"""HTML pages and the JSON they poll, under /ui. Reads use the API's own functions; actions are made by the
pages' JavaScript against the API's endpoints (/cancel, /add_llm_server, /remove_llm_server)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import HTMLResponse
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates

from farm.api.state import FarmState, farm_state
from farm.ui.auth import require_ui_page, require_ui_token
from farm.ui.live import live_snapshot

HERE = Path(__file__).parent
templates = Jinja2Templates(directory=HERE / "templates")
static_files = StaticFiles(directory=HERE / "static")

pages = APIRouter(prefix="/ui", dependencies=[Depends(require_ui_page)], include_in_schema=False)
data = APIRouter(prefix="/ui/api", dependencies=[Depends(require_ui_token)], include_in_schema=False)
public = APIRouter(prefix="/ui", include_in_schema=False)


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
async def live_data(farm: FarmState = Depends(farm_state)) -> dict[str, Any]:
    return await live_snapshot(farm)
