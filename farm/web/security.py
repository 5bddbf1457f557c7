"""Bearer-token auth for the facade and a request size limit."""

from __future__ import annotations

import secrets
from collections.abc import MutableMapping
from typing import Any

from fastapi import HTTPException, Request
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

from farm.settings import get_settings


async def require_token(request: Request) -> None:
    """Every facade endpoint but /healthz (and the gateway's session routes), when FARM_API_TOKEN is set.
    (async: no I/O here, and FastAPI would run a plain function in its thread pool on every request.)"""
    farm = getattr(request.app.state, "farm", None)
    token = (farm.settings if farm is not None else get_settings()).api_token
    if not token:
        return
    header = request.headers.get("authorization", "")
    scheme, _, given = header.partition(" ")
    if scheme.lower() != "bearer" or not secrets.compare_digest(given.strip(), token):
        raise HTTPException(
            status_code=401, detail="missing or wrong bearer token", headers={"WWW-Authenticate": "Bearer"}
        )


class BodySizeLimit:
    """Refuses bodies larger than `max_bytes` with 413 (declared length, or as they stream in).

    Plain ASGI rather than BaseHTTPMiddleware, which would add a task hop to every request."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        declared = dict(scope["headers"]).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > self.max_bytes:
            await self._refuse(scope, receive, send)
            return
        seen = 0

        async def limited() -> MutableMapping[str, Any]:
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_bytes:
                    raise _TooLarge
            return message

        try:
            await self.app(scope, limited, send)
        except _TooLarge:
            await self._refuse(scope, receive, send)

    async def _refuse(self, scope: Scope, receive: Receive, send: Send) -> None:
        detail = f"request body larger than {self.max_bytes} bytes"
        response = JSONResponse({"detail": detail}, status_code=413)
        await response(scope, receive, send)


class _TooLarge(Exception):
    pass
