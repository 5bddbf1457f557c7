"""Every route answers 503 within a second when the farm's Redis is gone, instead of after the Redis
clients' retries (about ten seconds, more for a request that makes several calls).

A request that has not answered after CHECK_AFTER_S asks the RedisWatch whether Redis answers (one
PING per process at most every FRESH_S, however many requests wait, with its own short timeout and no
retries); when it does not, the request is cancelled and answered 503 with Retry-After. Once an outage
is known, new requests are answered 503 at once (after a fresh PING). Requests that already started
their response (streams) are left to finish on their own. /healthz keeps its own answer.
"""

from __future__ import annotations

import asyncio
import contextlib
import json

import redis.asyncio as aioredis
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from farm.outage import redis_outage
from farm.redis_clients import async_redis_client
from farm.settings import Settings

CHECK_AFTER_S = 0.25
"""A request still running after this long asks whether Redis answers (a healthy request is faster)."""
PING_TIMEOUT_S = 0.6
FRESH_S = 0.25
"""A PING's answer serves every request asking within this long."""
EXEMPT = ("/healthz", "/ui/static/", "/docs", "/openapi.json")
RETRY_AFTER_S = 5
_BODY = json.dumps({"detail": "the farm's Redis is unreachable; retry shortly"}).encode()


class RedisWatch:
    """Whether this API process's Redis answers, asked by PING (coalesced across requests)."""

    def __init__(self, client: aioredis.Redis) -> None:
        self.r = client
        self._checked = -FRESH_S
        self._ok = True
        self._ping: asyncio.Future[bool] | None = None

    @classmethod
    def create(cls, settings: Settings) -> RedisWatch:
        client = async_redis_client(  # retry=False: no retries at all, the watch's own PING must fail fast
            settings.redis_url,
            settings=settings,
            retry=False,
            socket_connect_timeout=PING_TIMEOUT_S,
            socket_timeout=PING_TIMEOUT_S,
        )
        return cls(client)

    async def answers(self) -> bool:
        loop = asyncio.get_running_loop()
        if loop.time() - self._checked < FRESH_S:
            return self._ok
        if self._ping is None:
            self._ping = asyncio.ensure_future(self._probe())
        return await asyncio.shield(self._ping)

    async def _probe(self) -> bool:
        try:
            async with asyncio.timeout(PING_TIMEOUT_S):
                await self.r.ping()
        except Exception as exc:
            redis_outage.lost("api", exc if not isinstance(exc, TimeoutError) else "no PING answer")
            ok = False
        else:
            redis_outage.back()
            ok = True
        self._ok, self._checked, self._ping = ok, asyncio.get_running_loop().time(), None
        return ok

    async def aclose(self) -> None:
        await self.r.aclose()


class OutageGuard:
    """ASGI middleware answering 503 within a second while Redis is gone (module docstring)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        state = getattr(scope.get("app"), "state", None)
        watch: RedisWatch | None = getattr(state, "redis_watch", None)
        if scope["type"] != "http" or watch is None or scope["path"].startswith(EXEMPT):
            await self.app(scope, receive, send)
            return
        if redis_outage.down and not await watch.answers():
            await _unavailable(send)
            return
        started = False

        async def tracking_send(message: Message) -> None:
            nonlocal started
            started = True
            await send(message)

        task = asyncio.ensure_future(self.app(scope, receive, tracking_send))
        try:
            while True:
                done, _ = await asyncio.wait((task,), timeout=CHECK_AFTER_S)
                if done or started:
                    break
                if not await watch.answers():
                    task.cancel()
                    with contextlib.suppress(BaseException):
                        await task
                    if not started:
                        await _unavailable(send)
                    return
            await task
        except BaseException:
            task.cancel()
            raise


async def _unavailable(send: Send) -> None:
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(_BODY)).encode()),
        (b"retry-after", str(RETRY_AFTER_S).encode()),
    ]
    await send({"type": "http.response.start", "status": 503, "headers": headers})
    await send({"type": "http.response.body", "body": _BODY})
