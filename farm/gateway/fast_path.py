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

import functools
import os
import re
from collections.abc import Awaitable, Callable, Sequence

from starlette._utils import get_route_path
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Receive, Scope, Send

ModelCall = Callable[[Request, str, str], Awaitable[Response]]
"""(request, session id, route after the session id) -> the response."""
SESSION = "{session_id}"
_NAMED_GROUP = re.compile(r"\(\?P<[^>]+>")


class FastRoutes:
    """The routes of `routes` whose endpoint is in `served`, found as the router finds them: per request
    method, one regex made of the routes' own compiled path regexes in the router's order (the first
    alternative that matches the whole path wins, as the first matching route does in Starlette)."""

    def __init__(self, routes: Sequence[BaseRoute], served: Callable[[Route], bool]) -> None:
        self._routes = routes
        self._served = served
        self._prefix: str | None = None
        self._by_method: dict[str, tuple[re.Pattern[str], list[int | None]]] = {}

    def _plain_routes(self) -> list[Route]:
        plain = [route for route in self._routes if isinstance(route, Route)]
        if len(plain) != len(self._routes):
            raise TypeError("the fast path reads plain routes only")
        return plain

    def _common_prefix(self) -> str:
        """What every served route's path starts with before the session id: a request elsewhere is
        passed on at the cost of one str.startswith."""
        paths = [route.path for route in self._plain_routes() if self._served(route)]
        if not paths or not all(SESSION in path for path in paths):
            raise ValueError("every route served by the fast path takes a {session_id}")
        return os.path.commonpath([path[: path.index(SESSION)] for path in paths])

    def _compile(self, method: str) -> tuple[re.Pattern[str], list[int | None]]:
        """The routes that take `method`, in order, as one regex (alternative i is route i, its own
        path_regex with its groups made anonymous) and, per alternative, where the session id starts
        when the route is served (None: FastAPI serves it)."""
        alternatives: list[str] = []
        session_at: list[int | None] = []
        for route in self._plain_routes():
            if route.methods and method not in route.methods:
                continue  # Starlette's PARTIAL match: it looks on for a route that takes the method
            body = _NAMED_GROUP.sub("(?:", route.path_regex.pattern.removeprefix("^").removesuffix("$"))
            alternatives.append(f"(?P<r{len(alternatives)}>{body})")
            session_at.append(route.path.index(SESSION) if self._served(route) else None)
        return re.compile(f"^(?:{'|'.join(alternatives)})$"), session_at

    def __call__(self, scope: Scope) -> tuple[str, str] | None:
        """(session id, route after the session id) when `scope` is a model call the fast path serves."""
        if scope["type"] != "http":
            return None
        if self._prefix is None:  # read on first use: the routes are all declared by then
            self._prefix = self._common_prefix()
        path = get_route_path(scope)
        if not path.startswith(self._prefix):
            return None
        return self._route(scope["method"], path)

    @functools.lru_cache(maxsize=4096)  # noqa: B019 (one instance per router, alive as long as the app)
    def _route(self, method: str, path: str) -> tuple[str, str] | None:
        """A harness calls one path again and again (its session's route): matched once."""
        found = self._by_method.get(method)
        if found is None:
            found = self._by_method[method] = self._compile(method)
        regex, session_at = found
        match = regex.match(path)
        if match is None or match.lastgroup is None:
            return None
        at = session_at[int(match.lastgroup[1:])]
        if at is None:
            return None
        end = path.index("/", at)  # a session id is one path segment ([^/]+), a model route follows it
        return path[at:end], path[end + 1 :]


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
