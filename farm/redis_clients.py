"""The one place the farm opens Redis: sync and asyncio clients from FARM_REDIS_URL (and FARM_BROKER_URL).

A Redis Cluster is named `redis+cluster://host:port` (or `rediss+cluster://`; any node of it): the
clients are then redis-py's RedisCluster, which route each command and script by its keys' slot (the
job scripts' keys share a hash tag: farm/keys.py). Kombu has no cluster transport, so the Celery
broker is then a plain Redis at FARM_BROKER_URL, and pub/sub (a job's end) goes through a plain
connection to the named node (a cluster forwards PUBLISH to every node).

The URL is a plain `redis://`, `rediss://` or `unix://` URL (clients as `Redis.from_url` makes them),
or Sentinels in kombu's broker form `sentinel://[[user]:password@]host[:port][/db];sentinel://...`.
Then clients follow the master the sentinels call `FARM_REDIS_SENTINEL_MASTER`, through redis-py's
`Sentinel.master_for`, and Celery gets the same master name in its transport options. Credentials
and db come from the first sentinel URL (kombu ignores them on the others); they are the data
nodes' password, while the sentinels' own password is `FARM_REDIS_SENTINEL_PASSWORD`.

Riding out a failover (measured in tests/ops/test_redis_sentinel.py: writes are refused for about
11 s after a forced one): a connection that meets the demoted master, or a master that refuses
writes for want of in-sync replicas (NOREPLICAS, `min-replicas-to-write` in ops/redis), is dropped
with a ConnectionError; every command retries those with the backoff of farm/settings.py for
`FARM_REDIS_SENTINEL_RETRY_S`, and each reconnect asks the sentinels where the master is now. The
Celery broker uses the same connection class and publishes with retries over the same window.

Every pool blocks at its cap (`FARM_REDIS_MAX_CONNECTIONS`, redis-py's BlockingConnectionPool): a command
that finds every connection busy waits up to `FARM_REDIS_POOL_TIMEOUT_S` for one instead of failing at
once, so a burst (the gateway's record writes on a starved machine) queues rather than loses work.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import unquote, urlsplit

import redis
import redis.asyncio as aioredis
from kombu.transport.redis import SentinelChannel
from kombu.transport.redis import SentinelTransport as KombuSentinelTransport
from pydantic import BaseModel, ConfigDict, Field
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.asyncio.sentinel import Sentinel as AsyncSentinel
from redis.asyncio.sentinel import SentinelConnectionPool as AsyncSentinelConnectionPool
from redis.asyncio.sentinel import SentinelManagedConnection as AsyncSentinelManagedConnection
from redis.backoff import AbstractBackoff, NoBackoff
from redis.cluster import RedisCluster
from redis.exceptions import ResponseError
from redis.sentinel import Sentinel, SentinelConnectionPool, SentinelManagedConnection

from farm.settings import (
    Settings,
    async_redis_retry_options,
    get_settings,
    is_cluster_url,
    redis_retry_options,
)

SENTINEL_SCHEME = "sentinel"
DEFAULT_SENTINEL_PORT = 26379
SENTINEL_TIMEOUT_S = 2.0
"""Socket timeouts towards the sentinels, so one dead sentinel only delays master discovery."""
MASTER_CONNECT_TIMEOUT_S = 5.0
"""Connect timeout towards the master the sentinels named: a vanished host fails fast and the retry
asks the sentinels again instead of waiting for the kernel's TCP timeout."""

_REFUSED = re.compile(r"(?:^|caused error: |: -)(NOREPLICAS|READONLY) ")
"""A write refused by a node that is no master, or a master without the replicas it needs to take
writes: the error code alone, inside a pipeline as redis-py annotates it, or from a Lua script."""


class SentinelURL(BaseModel):
    """A parsed `sentinel://...;sentinel://...` URL."""

    model_config = ConfigDict(frozen=True)

    sentinels: tuple[tuple[str, int], ...] = Field(min_length=1)
    db: int = Field(0, ge=0)
    username: str | None = None
    password: str | None = None


def is_sentinel_url(url: str) -> bool:
    return url.strip().lower().startswith(f"{SENTINEL_SCHEME}://")


def parse_sentinel_url(url: str) -> SentinelURL:
    """Sentinel addresses, db and data-node credentials. ValueError for what kombu would read
    differently or not at all: another scheme, a query string, conflicting credentials or db."""
    parts = [part.strip() for part in url.split(";") if part.strip()]
    if not parts:
        raise ValueError("empty Sentinel URL")
    sentinels: list[tuple[str, int]] = []
    first: tuple[int, str | None, str | None] | None = None
    for part in parts:
        split = urlsplit(part)
        if split.scheme.lower() != SENTINEL_SCHEME:
            raise ValueError(f"{part!r}: every part of a Sentinel URL must start with sentinel://")
        if split.query or split.fragment:
            raise ValueError(f"{part!r}: query strings and fragments are not supported")
        if not split.hostname:
            raise ValueError(f"{part!r}: no sentinel host")
        try:
            port = split.port or DEFAULT_SENTINEL_PORT
        except ValueError:
            raise ValueError(f"{part!r}: bad port") from None
        sentinels.append((split.hostname, port))
        db = _db(split.path, part)
        username = unquote(split.username) if split.username else None
        password = unquote(split.password) if split.password else None
        if first is None:
            first = (db, username, password)
            continue
        # kombu takes db and credentials from the first URL only: a different one later is a mistake.
        if split.path.strip("/") and db != first[0]:
            raise ValueError(f"{part!r}: db differs from the first sentinel URL's")
        if (username, password) != (None, None) and (username, password) != first[1:]:
            raise ValueError(f"{part!r}: credentials differ from the first sentinel URL's")
    assert first is not None
    return SentinelURL(sentinels=tuple(sentinels), db=first[0], username=first[1], password=first[2])


def _db(path: str, part: str) -> int:
    name = path.strip("/")
    if not name:
        return 0
    if not (name.isascii() and name.isdigit()):
        raise ValueError(f"{part!r}: the path must be a db number")
    return int(name)


def sentinel_kwargs(settings: Settings) -> dict[str, Any]:
    """Connection options towards the sentinels themselves (redis-py and kombu alike)."""
    options: dict[str, Any] = {
        "socket_timeout": SENTINEL_TIMEOUT_S,
        "socket_connect_timeout": SENTINEL_TIMEOUT_S,
    }
    if settings.redis_sentinel_password:
        options["password"] = settings.redis_sentinel_password
    return options


class WriteRefusedError(redis.ConnectionError):
    """A write refused with NOREPLICAS or READONLY by the node a master connection reached. Nothing
    was written, so the command is safe to repeat; as a ConnectionError it is retried on a new
    connection, after asking the sentinels again where the master is."""


def _refused(error: ResponseError) -> WriteRefusedError | None:
    return WriteRefusedError(*error.args) if _REFUSED.search(str(error)) else None


class MasterConnection(SentinelManagedConnection):
    """A connection to the master that asks the sentinels where it is on every reconnect, and drops
    itself when that node refuses writes. redis-py (8.1) reconnects after an error through
    `connect_check_health`, which keeps the old address (redis/redis-py#3874), so a retried command
    would go to the demoted master until its retries ran out; and it turns a demoted master's
    READONLY into a ConnectionError only outside Lua scripts, NOREPLICAS never."""

    def connect_to(self, address: tuple[str, int]) -> None:
        self.host, self.port = address
        super().connect_check_health(
            check_health=self.connection_pool.check_connection, retry_socket_connect=False
        )

    def connect_check_health(self, check_health: bool = True, retry_socket_connect: bool = True) -> None:
        # One attempt: this is the reconnect inside a command, which the command's own retry repeats.
        if not self._sock:
            self._connect_retry()

    def read_response(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return super().read_response(*args, **kwargs)
        except ResponseError as error:
            if self.connection_pool.is_master and (refused := _refused(error)) is not None:
                self.disconnect()
                raise refused from error
            raise


class AsyncMasterConnection(AsyncSentinelManagedConnection):
    """MasterConnection for redis.asyncio clients."""

    async def connect_to(self, address: tuple[str, int]) -> None:
        self.host, self.port = address
        await super().connect_check_health(
            check_health=self.connection_pool.check_connection, retry_socket_connect=False
        )

    async def connect_check_health(
        self, check_health: bool = True, retry_socket_connect: bool = True
    ) -> None:
        if not self.is_connected:
            await self._connect_retry()

    async def read_response(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super().read_response(*args, **kwargs)
        except ResponseError as error:
            if self.connection_pool.is_master and (refused := _refused(error)) is not None:
                await self.disconnect()
                raise refused from error
            raise


class SentinelRedis(redis.Redis):
    """A master client that also closes its connections to the sentinels."""

    def close(self) -> None:
        super().close()
        manager = getattr(self.connection_pool, "sentinel_manager", None)
        if manager is not None:
            manager.close()


class AsyncSentinelRedis(aioredis.Redis):
    """The asyncio master client; closing it also closes its connections to the sentinels."""

    async def aclose(self, close_connection_pool: bool | None = None) -> None:
        await super().aclose(close_connection_pool)
        manager = getattr(self.connection_pool, "sentinel_manager", None)
        if manager is not None:
            await manager.aclose()


class BlockingSentinelConnectionPool(SentinelConnectionPool, redis.BlockingConnectionPool):
    """The master's pool, blocking at its cap like the plain URL's."""


class AsyncBlockingSentinelConnectionPool(AsyncSentinelConnectionPool, aioredis.BlockingConnectionPool):
    """The asyncio master's pool, blocking at its cap."""


def pool_options(settings: Settings) -> dict[str, Any]:
    """A blocking pool's cap and wait (a `max_connections` in the URL's query string wins)."""
    return {"max_connections": settings.redis_max_connections, "timeout": settings.redis_pool_timeout_s}


class _SentinelChannel(SentinelChannel):
    connection_class = MasterConnection


class SentinelTransport(KombuSentinelTransport):
    """kombu's `sentinel://` transport with the farm's master connection."""

    Channel = _SentinelChannel


def retries_for(backoff: AbstractBackoff, window_s: float) -> int:
    """How many retries with `backoff` keep trying for `window_s` seconds."""
    waited, retries = 0.0, 0
    while waited < window_s and retries < 1000:
        retries += 1
        waited += backoff.compute(retries)
    return retries


def _with_retry(defaults: dict[str, Any], retry: bool, window_s: float | None) -> dict[str, Any]:
    """The settings' retry options, or no retry at all (a probe must fail fast: redis-py's own default
    retries three times); for Sentinel with as many retries as span `window_s`."""
    if not retry:
        return {"retry": type(defaults["retry"])(NoBackoff(), 0)}  # the sync or asyncio Retry, as given
    if window_s is not None:
        policy = defaults["retry"]
        policy.update_retries(retries_for(policy._backoff, window_s))
    return defaults


def node_url(url: str) -> str:
    """The plain URL of the node a `redis+cluster://` URL names (other URLs unchanged)."""
    if not is_cluster_url(url):
        return url
    scheme, rest = url.strip().split("://", 1)
    return f"{scheme.lower().removesuffix('+cluster')}://{rest}"


@dataclass(frozen=True)
class _Flavour:
    """The classes one side (sync or asyncio) of redis-py builds its clients from."""

    retry_options: Callable[[], dict[str, Any]]
    cluster: Any
    redis: Any
    pool: Any
    sentinel: Any
    sentinel_redis: Any
    sentinel_pool: Any
    master_connection: Any


_SYNC = _Flavour(
    redis_retry_options,
    RedisCluster,
    redis.Redis,
    redis.BlockingConnectionPool,
    Sentinel,
    SentinelRedis,
    BlockingSentinelConnectionPool,
    MasterConnection,
)
_ASYNC = _Flavour(
    async_redis_retry_options,
    AsyncRedisCluster,
    aioredis.Redis,
    aioredis.BlockingConnectionPool,
    AsyncSentinel,
    AsyncSentinelRedis,
    AsyncBlockingSentinelConnectionPool,
    AsyncMasterConnection,
)


def _client(flavour: _Flavour, url: str | None, settings: Settings | None, retry: bool, options: Any) -> Any:
    settings = settings or get_settings()
    url = url or settings.redis_url
    if is_cluster_url(url):
        # The same commands, routed by slot (RedisCluster retries a moved slot or a lost node itself).
        no_retry = {} if retry else _with_retry(flavour.retry_options(), False, None)
        return flavour.cluster.from_url(node_url(url), **{**no_retry, **options})
    if not is_sentinel_url(url):
        options = {**pool_options(settings), **_with_retry(flavour.retry_options(), retry, None), **options}
        return flavour.redis.from_pool(flavour.pool.from_url(url, **options))
    target = parse_sentinel_url(url)
    retrying = _with_retry(flavour.retry_options(), retry, settings.redis_sentinel_retry_s)
    manager = flavour.sentinel(list(target.sentinels), sentinel_kwargs=sentinel_kwargs(settings))
    return manager.master_for(
        settings.redis_sentinel_master,
        redis_class=flavour.sentinel_redis,
        connection_pool_class=flavour.sentinel_pool,
        connection_class=flavour.master_connection,
        **{**pool_options(settings), **_master_options(target), **retrying, **options},
    )


def redis_client(
    url: str | None = None, *, settings: Settings | None = None, retry: bool = True, **options: Any
) -> redis.Redis:
    """A sync client for `url` (default FARM_REDIS_URL); `options` go to every connection
    (e.g. `decode_responses=True`). `retry=False` makes one attempt per command (probes)."""
    return cast(redis.Redis, _client(_SYNC, url, settings, retry, options))


def async_redis_client(
    url: str | None = None, *, settings: Settings | None = None, retry: bool = True, **options: Any
) -> aioredis.Redis:
    """The asyncio client (the API, the gateway), made the same way as `redis_client`."""
    return cast(aioredis.Redis, _client(_ASYNC, url, settings, retry, options))


def broker_url(settings: Settings) -> str:
    """The Celery broker: FARM_BROKER_URL, else FARM_REDIS_URL (which must then not be a cluster)."""
    if settings.broker_url:
        return settings.broker_url
    if is_cluster_url(settings.redis_url):
        raise ValueError("FARM_REDIS_URL names a Redis Cluster: set FARM_BROKER_URL to a plain Redis")
    return settings.redis_url


def broker_client(settings: Settings | None = None) -> redis.Redis | None:
    """A client of the broker when it is not the farm's Redis (None: the same Redis; job scripts then
    push stage messages themselves)."""
    settings = settings or get_settings()
    return redis_client(settings.broker_url, settings=settings) if settings.broker_url else None


def async_broker_client(settings: Settings | None = None) -> aioredis.Redis | None:
    settings = settings or get_settings()
    return async_redis_client(settings.broker_url, settings=settings) if settings.broker_url else None


def async_pubsub_client(settings: Settings | None = None) -> aioredis.Redis:
    """Where the API subscribes to job ends: the farm's Redis, or on a cluster the node its URL names."""
    settings = settings or get_settings()
    return async_redis_client(node_url(settings.redis_url), settings=settings)


def _master_options(target: SentinelURL) -> dict[str, Any]:
    return {
        "db": target.db,
        "username": target.username,
        "password": target.password,
        "socket_connect_timeout": MASTER_CONNECT_TIMEOUT_S,
    }


def celery_transport_options(settings: Settings) -> dict[str, Any]:
    """What kombu's `sentinel://` transport needs besides the farm's own transport options (nothing
    for a plain URL): the master's name and how to reach the sentinels."""
    if not is_sentinel_url(broker_url(settings)):
        return {}
    parse_sentinel_url(broker_url(settings))  # a malformed URL fails when the app is made, not later
    return {"master_name": settings.redis_sentinel_master, "sentinel_kwargs": sentinel_kwargs(settings)}


def celery_conf(settings: Settings) -> dict[str, Any]:
    """Celery settings for a `sentinel://` broker (nothing for a plain URL): the transport with the
    farm's master connection, and publishing that retries across the failover window instead of
    Celery's default of about half a second."""
    if not is_sentinel_url(broker_url(settings)):
        return {}
    step, cap = 0.5, 2.0
    waited, retries = 0.0, 0
    while waited < settings.redis_sentinel_retry_s:
        waited += min(retries * step, cap)
        retries += 1
    return {
        "broker_transport": f"{__name__}:SentinelTransport",
        "task_publish_retry_policy": {
            "max_retries": retries,
            "interval_start": 0,
            "interval_step": step,
            "interval_max": cap,
        },
    }


def redis_answers(url: str, *, settings: Settings | None = None, timeout_s: float = 0.5) -> bool:
    """Whether a master answers PING at `url` (for a Sentinel URL: the master the sentinels name).
    A malformed URL raises ValueError rather than reading as "nothing answers"."""
    try:
        client = redis_client(
            url, settings=settings, retry=False, socket_connect_timeout=timeout_s, socket_timeout=timeout_s
        )
        try:
            return bool(client.ping())
        finally:
            client.close()
    except (redis.RedisError, OSError):
        return False


__all__ = [
    "AsyncBlockingSentinelConnectionPool",
    "AsyncMasterConnection",
    "BlockingSentinelConnectionPool",
    "MasterConnection",
    "SentinelTransport",
    "SentinelURL",
    "WriteRefusedError",
    "async_broker_client",
    "async_pubsub_client",
    "async_redis_client",
    "broker_client",
    "broker_url",
    "celery_conf",
    "celery_transport_options",
    "is_sentinel_url",
    "node_url",
    "parse_sentinel_url",
    "pool_options",
    "redis_answers",
    "redis_client",
    "sentinel_kwargs",
]
