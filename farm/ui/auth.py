"""The API's bearer token, also accepted from a cookie so a browser can open the pages.

The login page stores the token in `farm_token` (SameSite=Strict); the pages' JavaScript sends it back as
`Authorization: Bearer` when it calls the API's own endpoints for actions."""

from __future__ import annotations

import secrets
from urllib.parse import quote

from fastapi import HTTPException, Request

from farm.web.security import require_token

TOKEN_COOKIE = "farm_token"


def _expected(request: Request) -> str | None:
    token: str | None = request.app.state.farm.settings.api_token
    return token


async def require_ui_token(request: Request) -> None:
    """JSON routes under /ui: the bearer header (checked by the API's own rule) or the cookie."""
    token = _expected(request)
    if not token:
        return
    cookie = request.cookies.get(TOKEN_COOKIE, "")
    if cookie and secrets.compare_digest(cookie, token):
        return
    await require_token(request)


async def require_ui_page(request: Request) -> None:
    """HTML pages: like require_ui_token, but a browser without the token is sent to the login page."""
    try:
        await require_ui_token(request)
    except HTTPException as exc:
        target = quote(str(request.url.path) + (f"?{request.url.query}" if request.url.query else ""))
        raise HTTPException(status_code=303, headers={"Location": f"/ui/login?next={target}"}) from exc
