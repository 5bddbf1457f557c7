"""The clients one API process shares across requests, built in the app's lifespan."""

from __future__ import annotations

from dataclasses import dataclass

import redis.asyncio as aioredis
from celery import Celery
from fastapi import Request

from farm.api.submit import Submitter
from farm.api.waiter import JobWaiter
from farm.jobs.store import AsyncJobStore
from farm.pool import AsyncBackendPool
from farm.settings import Settings, async_redis_retry_options


@dataclass
class FarmState:
    settings: Settings
    redis: aioredis.Redis
    store: AsyncJobStore
    pool: AsyncBackendPool
    submitter: Submitter
    waiter: JobWaiter

    @classmethod
    def build(cls, settings: Settings, celery: Celery) -> FarmState:
        client = aioredis.Redis.from_url(settings.redis_url, **async_redis_retry_options())
        store = AsyncJobStore(client, settings.result_ttl_s)
        return cls(
            settings=settings,
            redis=client,
            store=store,
            pool=AsyncBackendPool(client),
            submitter=Submitter(celery, store),
            waiter=JobWaiter(client, store),
        )


def farm_state(request: Request) -> FarmState:
    return request.app.state.farm
