"""The clients one API process shares across requests, built in the app's lifespan."""

from __future__ import annotations

from dataclasses import dataclass

from celery import Celery
from fastapi import Request

from farm.api.submit import Submitter
from farm.api.url_allow import URLAllowList
from farm.api.waiter import JobWaiter
from farm.jobs.messages import StageMessages
from farm.jobs.store import AsyncJobStore
from farm.jobs.task_records import AsyncTaskStore
from farm.pool import AsyncBackendPool
from farm.redis_clients import async_broker_client, async_pubsub_client, async_redis_client
from farm.settings import Settings
from farm.web.shared_state import SharedState


@dataclass
class FarmState(SharedState):
    """The shared clients (farm/web/shared_state.py) and what only the REST facade uses: submitting, waiting
    for results, the URL policies."""

    submitter: Submitter
    waiter: JobWaiter
    backend_urls: URLAllowList
    callback_urls: URLAllowList

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
            tasks=AsyncTaskStore(client),
            backend_urls=URLAllowList.parse(settings.backend_allow),
            callback_urls=URLAllowList.parse(settings.callback_allow),
        )


async def farm_state(request: Request) -> FarmState:
    """(async: FastAPI would run a plain function in its thread pool on every request.)"""
    state: FarmState = request.app.state.farm
    return state
