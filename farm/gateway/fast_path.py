"""The model-call routes served straight from ASGI, ahead of FastAPI's routing, middleware and dependency
solving: on the bench machine that work cost ~0.5 ms per call, all of it on the critical path to the first
streamed chunk (bench/gateway.py part 2). The FastAPI routes stay (docs, and any app without this middleware).

Installed innermost among an app's own middleware, so a body-size limit or JSON check around it still applies.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

ModelCall = Callable[[Request, str, str], Awaitable[Response]]
"""(request, session id, route after the session id) -> the response."""

_MODEL_CALL = re.compile(
    r"^/gateway/sessions/(?P<session>[^/]+)/"
    r"(?P<route>v1/chat/completions|v1/responses|v1/messages|v1(?:beta)?/models/[^/]+)$"
)


def model_route(scope: Scope) -> tuple[str, str] | None:
    """(session id, route) when `scope` is a model call the fast path serves."""
    if scope["type"] != "http" or scope["method"] != "POST":
        return None
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    match = _MODEL_CALL.match(path[len(root) :] if root and path.startswith(root) else path)
    return (match["session"], match["route"]) if match else None


class ModelCallFastPath:
    def __init__(self, app: ASGIApp, handle: ModelCall) -> None:
        self.app = app
        self.handle = handle

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        found = model_route(scope)
        if found is None:
            await self.app(scope, receive, send)
            return
        response = await self.handle(Request(scope, receive), *found)
        await response(scope, receive, send)
