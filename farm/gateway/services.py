"""The gateway's long-lived parts: Redis, the session store, the backend source and the HTTP client."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import httpx
import redis
import redis.asyncio as aioredis
from fastapi import FastAPI, Request

from farm.builders.records import CompletionRecord
from farm.gateway.backends import BackendSource
from farm.gateway.errors import ErrorKind, GatewayError
from farm.gateway.forwarding import Forwarder
from farm.gateway.sessions import SessionNotFound, SessionStore
from farm.gateway.upstream_http import UpstreamClient
from farm.redis_clients import async_redis_client
from farm.settings import Settings, get_settings


@dataclass
class RecordWriterStats:
    """This process's completion-record writer (GatewayServices.keep), for /metrics: records stored, records
    that could not be stored (the call answered an error instead), and the time calls waited on the
    store (back-pressure: a busy connection pool or a slow Redis)."""

    written: int = 0
    dropped: int = 0
    wait_s_sum: float = 0.0
    wait_s_max: float = 0.0

    def waited(self, seconds: float) -> None:
        self.wait_s_sum += seconds
        self.wait_s_max = max(self.wait_s_max, seconds)


@dataclass
class GatewayServices:
    redis: aioredis.Redis
    store: SessionStore
    backends: BackendSource
    http: httpx.AsyncClient
    forwarder: Forwarder
    owns_redis: bool = True
    writer: RecordWriterStats = field(default_factory=RecordWriterStats)

    async def keep(self, record: CompletionRecord) -> None:
        """Store `record` in its session's log; part of answering the call, so no reply goes out unrecorded.
        A busy pool makes it wait (blocking pools), a broken connection retries (the client's retry policy,
        the append being idempotent); a record that cannot be stored becomes the call's error."""
        started = time.monotonic()
        try:
            await self.store.append_completion(record)
            self.writer.written += 1
        except SessionNotFound:
            self.writer.dropped += 1
            raise GatewayError(
                ErrorKind.not_found,
                f"session {record.session_id!r} expired before its completion was recorded",
            ) from None
        except redis.RedisError as exc:
            self.writer.dropped += 1
            logger.warning(
                "completion %s of session %s not recorded: %r", record.completion_id, record.session_id, exc
            )
            raise GatewayError(
                ErrorKind.unavailable, f"the completion could not be recorded ({type(exc).__name__}); retry"
            ) from exc
        finally:
            self.writer.waited(time.monotonic() - started)

    @classmethod
    def create(
        cls,
        redis_url: str | None = None,
        backends: BackendSource | None = None,
        upstream_timeout_s: float = 600.0,
        max_attempts: int = 3,
        redis: aioredis.Redis | None = None,
        settings: Settings | None = None,
    ) -> GatewayServices:
        """Pass `redis` (and `backends`) to share the API's connection and pool; they are then not closed."""
        settings = settings or get_settings()
        owns_redis = redis is None
        redis = redis or async_redis_client(redis_url or settings.redis_url, settings=settings)
        if backends is None:
            from farm.pool import AsyncBackendPool  # the farm's shared pool, when running inside the API

            backends = AsyncBackendPool(redis)
        http = httpx.AsyncClient(
            timeout=httpx.Timeout(upstream_timeout_s, connect=5.0),
            limits=httpx.Limits(max_connections=1024, max_keepalive_connections=256),
        )
        return cls(
            redis=redis,
            store=SessionStore(redis, ttl_s=settings.result_ttl_s),
            backends=backends,
            http=http,
            forwarder=Forwarder(
                backends,
                http,
                max_attempts=max_attempts,
                fast=UpstreamClient(read_timeout=upstream_timeout_s),
            ),
            owns_redis=owns_redis,
        )

    async def close(self) -> None:
        await self.http.aclose()
        if self.forwarder.fast is not None:
            await self.forwarder.fast.aclose()
        if self.owns_redis:
            await self.redis.aclose()


logger = logging.getLogger(__name__)
_lock = asyncio.Lock()


async def get_services(request: Request) -> GatewayServices:
    """The app's services; made on first use when no lifespan installed one.

    Inside the farm API it shares the API's Redis client, settings and backend pool (`app.state.farm`).
    """
    services: GatewayServices | None = getattr(request.app.state, "gateway", None)
    if services is None:
        async with _lock:
            services = getattr(request.app.state, "gateway", None)
            if services is None:
                farm = getattr(request.app.state, "farm", None)
                if farm is not None:
                    services = GatewayServices.create(
                        redis=farm.redis, backends=farm.pool, settings=farm.settings
                    )
                else:
                    services = GatewayServices.create()
                request.app.state.gateway = services
    return services


@asynccontextmanager
async def gateway_lifespan(app: FastAPI, services: GatewayServices | None = None) -> AsyncIterator[None]:
    """Install them on `app.state.gateway` for the app's lifetime (compose into the API's lifespan)."""
    app.state.gateway = services or GatewayServices.create()
    try:
        yield
    finally:
        await app.state.gateway.close()
        app.state.gateway = None
