"""The model-call routes served straight from ASGI, ahead of FastAPI's routing, middleware and dependency
solving: on the bench machine that work cost ~0.5 ms per call, all of it on the critical path to the first
streamed chunk (bench/gateway.py part 2). The FastAPI routes stay (docs, and any app without this middleware).

Which paths it serves is not written here: `FastRoutes` takes the gateway router's own routes and matches a
request as Starlette's router would (the first route that matches path and method wins), then serves it only
when that route is one of the model calls. A path FastAPI would send elsewhere (a management route behind the
bearer token, count_tokens, provider detection) is never served here.

Installed innermost among an app's own middleware, so a body-size limit or JSON check around it still applies.
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Sequence

from starlette._utils import get_route_path
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Match, Route
from starlette.types import ASGIApp, Receive, Scope, Send

ModelCall = Callable[[Request, str, str], Awaitable[Response]]
"""(request, session id, route after the session id) -> the response."""
SESSION = "{session_id}"


class FastRoutes:
    """The routes of `routes` whose endpoint is in `served`, found as the router finds them."""

    def __init__(self, routes: Sequence[BaseRoute], served: Callable[[Route], bool]) -> None:
        self._routes = routes
        self._served = served
        self._prefix: str | None = None

    def _common_prefix(self) -> str:
        """What every served route's path starts with before the session id: a request elsewhere is
        passed on without matching (the API's own routes pay one str.startswith)."""
        paths = [r.path for r in self._routes if isinstance(r, Route) and self._served(r)]
        if not paths or not all(SESSION in path for path in paths):
            raise ValueError("every route served by the fast path takes a {session_id}")
        return os.path.commonpath([path[: path.index(SESSION)] for path in paths])

    def __call__(self, scope: Scope) -> tuple[str, str] | None:
        """(session id, route after the session id) when `scope` is a model call the fast path serves."""
        if scope["type"] != "http":
            return None
        if self._prefix is None:  # read on first use: the routes are all declared by then
            self._prefix = self._common_prefix()
        path = get_route_path(scope)
        if not path.startswith(self._prefix):
            return None
        for route in self._routes:
            match, child = route.matches(scope)
            if match is Match.FULL:
                if not (isinstance(route, Route) and self._served(route)):
                    return None
                session: str = child["path_params"]["session_id"]
                start = route.path.index(SESSION) + len(session) + 1
                return session, path[start:]
        return None


class ModelCallFastPath:
    def __init__(self, app: ASGIApp, handle: ModelCall, routes: FastRoutes) -> None:
        self.app = app
        self.handle = handle
        self.routes = routes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        found = self.routes(scope)
        if found is None:
            await self.app(scope, receive, send)
            return
        response = await self.handle(Request(scope, receive), *found)
        await response(scope, receive, send)
