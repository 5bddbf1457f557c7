"""What one API process shares across requests on `app.state.farm`, as every reader of the farm's state
sees it: the settings, the Redis client, the job store, the backend pool, the task API's records, and
whether the farm takes new work. The REST facade extends it with what only it uses (farm/api/state.py);
the viewer and the gateway read this much, so none of them needs the facade."""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import redis.asyncio as aioredis
from fastapi import Request

from farm.jobs.store import AsyncJobStore
from farm.jobs.task_records import AsyncTaskStore
from farm.pool import AsyncBackendPool
from farm.settings import Settings

ACCEPTING_CACHE_S = 1.0
"""Other API replicas see /stop and /start within this long."""


@dataclass
class SharedState:
    settings: Settings
    redis: aioredis.Redis
    store: AsyncJobStore
    pool: AsyncBackendPool
    tasks: AsyncTaskStore
    _accepting: tuple[float, bool] = field(default=(0.0, True), kw_only=True)

    async def accepting(self) -> bool:
        """Whether new work is taken (read from Redis at most once a second per API process)."""
        now = time.monotonic()
        if now - self._accepting[0] > ACCEPTING_CACHE_S:
            self._accepting = (now, await self.store.accepting())
        return self._accepting[1]

    async def set_accepting(self, value: bool) -> None:
        await self.store.set_accepting(value)
        self._accepting = (time.monotonic(), value)


async def shared_state(request: Request) -> SharedState:
    """(async: FastAPI would run a plain function in its thread pool on every request.)"""
    state: SharedState = request.app.state.farm
    return state
