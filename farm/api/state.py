"""The clients one API process shares across requests, built in the app's lifespan."""

from __future__ import annotations

import time
from dataclasses import dataclass

import redis.asyncio as aioredis
from celery import Celery
from fastapi import Request

from farm import keys
from farm.api.submit import Submitter
from farm.api.url_policy import URLPolicy
from farm.api.waiter import JobWaiter
from farm.jobs.messages import StageMessages
from farm.jobs.store import AsyncJobStore
from farm.pool import AsyncBackendPool
from farm.redis_clients import async_broker_client, async_pubsub_client, async_redis_client
from farm.settings import Settings

ACCEPTING_CACHE_S = 1.0
"""Other API replicas see /stop and /start within this long."""


@dataclass
class FarmState:
    settings: Settings
    redis: aioredis.Redis
    store: AsyncJobStore
    pool: AsyncBackendPool
    submitter: Submitter
    waiter: JobWaiter
    backend_urls: URLPolicy
    callback_urls: URLPolicy
    _accepting: tuple[float, bool] = (0.0, True)

    async def accepting(self) -> bool:
        """Whether new work is taken (read from Redis at most once a second per API process)."""
        now = time.monotonic()
        if now - self._accepting[0] > ACCEPTING_CACHE_S:
            self._accepting = (now, await self.redis.get(keys.ACCEPTING) != b"0")
        return self._accepting[1]

    async def set_accepting(self, value: bool) -> None:
        await self.redis.set(keys.ACCEPTING, "1" if value else "0")
        self._accepting = (time.monotonic(), value)

    @classmethod
    def build(cls, settings: Settings, celery: Celery) -> FarmState:
        client = async_redis_client(settings.redis_url, settings=settings)
        store = AsyncJobStore(client, settings.result_ttl_s, broker=async_broker_client(settings))
        return cls(
            settings=settings,
            redis=client,
            store=store,
            pool=AsyncBackendPool(client),
            submitter=Submitter(StageMessages(celery), store),
            waiter=JobWaiter(async_pubsub_client(settings), store),
            backend_urls=URLPolicy.parse(settings.backend_allow),
            callback_urls=URLPolicy.parse(settings.callback_allow),
        )


async def farm_state(request: Request) -> FarmState:
    """(async: FastAPI would run a plain function in its thread pool on every request.)"""
    state: FarmState = request.app.state.farm
    return state
