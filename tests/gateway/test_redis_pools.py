"""The farm's Redis clients wait for a free connection at their pool's cap instead of failing (real Redis).

With one connection held by a blocking command, a second command waits and succeeds once it is free; only
past the pool's wait does it fail (a ConnectionError, which the gateway turns into a 503 and a failure entry).
"""

from __future__ import annotations

import asyncio
import threading

import pytest
import redis

from farm.embedded_redis import EmbeddedRedis
from farm.redis_clients import (
    AsyncBlockingSentinelConnectionPool,
    BlockingSentinelConnectionPool,
    async_redis_client,
    redis_client,
)
from farm.settings import Settings


def _capped(redis_server: EmbeddedRedis, cap: int) -> str:
    return f"{redis_server.url}?max_connections={cap}"


def test_sync_client_waits_at_its_cap(redis_server: EmbeddedRedis) -> None:
    client = redis_client(_capped(redis_server, 1), settings=Settings())
    try:
        holder = threading.Thread(target=client.blpop, args=(["records:nothing"], 0.5))
        holder.start()
        while client.connection_pool.pool.qsize() > 0 and holder.is_alive():  # the one connection taken
            threading.Event().wait(0.005)
        assert client.ping()  # waited for the BLPOP's connection instead of raising MaxConnectionsError
        holder.join()
    finally:
        client.close()


async def _async_waits(url: str) -> None:
    client = async_redis_client(url, settings=Settings())
    try:
        held = asyncio.ensure_future(client.blpop(["records:nothing"], 0.5))
        await asyncio.sleep(0.05)
        assert await client.ping()
        assert await held is None
    finally:
        await client.aclose()


def test_async_client_waits_at_its_cap(redis_server: EmbeddedRedis) -> None:
    asyncio.run(_async_waits(_capped(redis_server, 1)))


async def _async_gives_up(url: str) -> None:
    client = async_redis_client(url, settings=Settings(redis_pool_timeout_s=0.2))
    try:
        held = asyncio.ensure_future(client.blpop(["records:nothing"], 2))
        await asyncio.sleep(0.05)
        with pytest.raises(redis.ConnectionError):
            await client.ping()
        await held
    finally:
        await client.aclose()


def test_a_wait_past_the_pool_timeout_is_a_connection_error(redis_server: EmbeddedRedis) -> None:
    asyncio.run(_async_gives_up(_capped(redis_server, 1)))


def test_the_cap_and_wait_come_from_settings() -> None:
    settings = Settings(redis_max_connections=7, redis_pool_timeout_s=3.5)
    sync = redis_client("redis://127.0.0.1:1/0", settings=settings).connection_pool
    assert isinstance(sync, redis.BlockingConnectionPool)
    assert (sync.max_connections, sync.timeout) == (7, 3.5)
    sentinel = redis_client("sentinel://127.0.0.1:1", settings=settings).connection_pool
    assert isinstance(sentinel, BlockingSentinelConnectionPool)
    assert (sentinel.max_connections, sentinel.timeout) == (7, 3.5)
    asynchronous = async_redis_client("sentinel://127.0.0.1:1", settings=settings).connection_pool
    assert isinstance(asynchronous, AsyncBlockingSentinelConnectionPool)
    assert (asynchronous.max_connections, asynchronous.timeout) == (7, 3.5)
