"""/openapi.json, /docs and /redoc behind the same bearer token as the rest of the facade: the schema
lists every route and model, so with FARM_API_TOKEN set it is not for anonymous readers either.
(FastAPI's own doc routes take no dependencies; these are the same pages, served with one.)"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html, get_swagger_ui_oauth2_redirect_html
from fastapi.responses import HTMLResponse

from farm.web.security import require_token

router = APIRouter(dependencies=[Depends(require_token)], include_in_schema=False)


def _schema_url(request: Request) -> str:
    return f"{request.scope.get('root_path', '').rstrip('/')}/openapi.json"


@router.get("/openapi.json")
async def openapi(request: Request) -> dict[str, Any]:
    schema: dict[str, Any] = request.app.openapi()
    return schema


@router.get("/docs")
async def swagger(request: Request) -> HTMLResponse:
    return get_swagger_ui_html(
        openapi_url=_schema_url(request),
        title=f"{request.app.title} - Swagger UI",
        oauth2_redirect_url="/docs/oauth2-redirect",
    )


@router.get("/docs/oauth2-redirect")
async def swagger_redirect() -> HTMLResponse:
    return get_swagger_ui_oauth2_redirect_html()


@router.get("/redoc")
async def redoc(request: Request) -> HTMLResponse:
    return get_redoc_html(openapi_url=_schema_url(request), title=f"{request.app.title} - ReDoc")
