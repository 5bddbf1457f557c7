"""Process-wide clients a worker shares across the jobs it runs."""

from __future__ import annotations

from functools import lru_cache

import redis

from farm.jobs.messages import StageMessages
from farm.jobs.store import JobStore
from farm.pool import BackendPool
from farm.redis_clients import broker_client
from farm.redis_clients import redis_client as make_redis_client
from farm.settings import get_settings


@lru_cache
def redis_client() -> redis.Redis:
    return make_redis_client()


@lru_cache
def job_store() -> JobStore:
    return JobStore(redis_client(), get_settings().result_ttl_s, broker=broker_client())


@lru_cache
def backend_pool() -> BackendPool:
    return BackendPool(redis_client())


@lru_cache
def stage_messages() -> StageMessages:
    from farm.celery_app import app

    return StageMessages(app)
