"""farm/redis_clients.py without servers: Sentinel URLs read as kombu reads them, the options the
clients and the Celery app get, and which errors count as a refused write. The clients against a
real Sentinel set, through a failover, are in tests/ops/test_redis_sentinel.py."""

from __future__ import annotations

import asyncio
import itertools
from urllib.parse import quote

import pytest
import redis
import redis.asyncio as aioredis
from hypothesis import given
from hypothesis import strategies as st
from kombu import Connection
from kombu.utils.functional import fxrange
from kombu.utils.url import url_to_parts
from redis.backoff import ExponentialBackoff
from redis.exceptions import ResponseError

from farm.redis_clients import (
    DEFAULT_SENTINEL_PORT,
    AsyncMasterConnection,
    AsyncSentinelRedis,
    MasterConnection,
    SentinelRedis,
    SentinelTransport,
    SentinelURL,
    _refused,
    async_redis_client,
    celery_conf,
    celery_transport_options,
    is_sentinel_url,
    parse_sentinel_url,
    redis_client,
    retries_for,
)
from farm.settings import Settings

hosts = st.one_of(
    st.from_regex(r"[a-z][a-z0-9-]{0,14}(\.[a-z][a-z0-9-]{0,10}){0,2}", fullmatch=True),
    st.ip_addresses(v=4).map(str),
)
ports = st.one_of(st.none(), st.integers(1, 65535))
secrets = st.one_of(st.none(), st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1))
dbs = st.one_of(st.none(), st.integers(0, 15))


def sentinel_part(host: str, port: int | None, password: str | None, db: int | None) -> str:
    auth = f":{quote(password, safe='')}@" if password else ""
    return f"sentinel://{auth}{host}{'' if port is None else f':{port}'}{'' if db is None else f'/{db}'}"


def sentinel_settings(url: str, **fields: object) -> Settings:
    return Settings(redis_url=url, **fields)


@given(
    st.lists(st.tuples(hosts, ports), min_size=1, max_size=5),
    secrets,
    dbs,
    st.booleans(),
)
def test_sentinel_urls_read_as_kombu_reads_them(
    addresses: list[tuple[str, int | None]], password: str | None, db: int | None, repeat: bool
) -> None:
    """Every sentinel from every part; password and db from the first part (repeated or not on the
    others, as ops/README.md writes it)."""
    parts = [
        sentinel_part(host, port, password if i == 0 or repeat else None, db if i == 0 or repeat else None)
        for i, (host, port) in enumerate(addresses)
    ]
    url = ";".join(parts)
    parsed = parse_sentinel_url(url)

    connection = Connection(url, transport_options={"master_name": "farm-redis"})
    # kombu's SentinelChannel: every `alt` URL, or the one URL when there is no ';'.
    kombu_urls = map(url_to_parts, connection.alt or [url])
    assert list(parsed.sentinels) == [(p.hostname, p.port or DEFAULT_SENTINEL_PORT) for p in kombu_urls]
    assert parsed.password == connection.password == password
    # ...and the db as its Channel._prepare_virtual_host reads the virtual host.
    assert parsed.db == int((connection.virtual_host or "").strip("/") or 0) == (db or 0)
    assert parsed.username is None
    assert is_sentinel_url(url)


def test_credentials_ipv6_and_defaults() -> None:
    url = "sentinel://farm:p%40ss%3Bw@[::1]:26380/3; sentinel://s2 ;sentinel://farm:p%40ss%3Bw@s3:1/3"
    assert parse_sentinel_url(url) == SentinelURL(
        sentinels=(("::1", 26380), ("s2", DEFAULT_SENTINEL_PORT), ("s3", 1)),
        db=3,
        username="farm",
        password="p@ss;w",
    )
    assert parse_sentinel_url("sentinel://s1/") == SentinelURL(sentinels=(("s1", DEFAULT_SENTINEL_PORT),))


@pytest.mark.parametrize(
    "url",
    [
        "",
        " ; ",
        "redis://127.0.0.1:6379/0",
        "sentinel://s1:26379;redis://s2:6379",
        "sentinel://s1:26379?socket_timeout=1",
        "sentinel://s1#frag",
        "sentinel://:pw@:26379",
        "sentinel://s1:99999",
        "sentinel://s1:port",
        "sentinel://s1/zero",
        "sentinel://s1/-1",
        "sentinel://s1/0;sentinel://s2/1",
        "sentinel://:a@s1;sentinel://:b@s2",
        "sentinel://u:a@s1;sentinel://:a@s2",
    ],
)
def test_urls_kombu_would_read_differently_are_refused(url: str) -> None:
    with pytest.raises(ValueError):
        parse_sentinel_url(url)


@pytest.mark.parametrize(
    ("url", "sentinel"),
    [
        ("sentinel://s1", True),
        ("  SENTINEL://s1", True),
        ("redis://127.0.0.1:6379/0", False),
        ("rediss://h:6380/0", False),
        ("unix:///run/redis.sock?db=0", False),
    ],
)
def test_is_sentinel_url(url: str, sentinel: bool) -> None:
    assert is_sentinel_url(url) is sentinel


def test_plain_urls_change_nothing_for_celery() -> None:
    settings = sentinel_settings("redis://127.0.0.1:6379/0", redis_sentinel_password="x")
    assert celery_transport_options(settings) == {}
    assert celery_conf(settings) == {}


def test_sentinel_urls_give_celery_the_master_and_the_farm_transport() -> None:
    url = "sentinel://:pw@s1:26379/0;sentinel://:pw@s2:26379/0"
    settings = sentinel_settings(url, redis_sentinel_master="ha", redis_sentinel_password="sp")
    options = celery_transport_options(settings)
    assert options["master_name"] == "ha"
    assert options["sentinel_kwargs"]["password"] == "sp"
    assert "password" not in celery_transport_options(sentinel_settings(url))["sentinel_kwargs"]
    conf = celery_conf(settings)
    assert type(Connection(url, transport=conf["broker_transport"]).transport) is SentinelTransport
    assert SentinelTransport.Channel.connection_class is MasterConnection
    with pytest.raises(ValueError):
        celery_transport_options(sentinel_settings("sentinel://s1?x=1"))


@given(st.floats(0.5, 300))
def test_publish_retries_span_the_failover_window(window_s: float) -> None:
    """Summed as kombu sleeps between publish attempts (Connection.ensure)."""
    policy = celery_conf(sentinel_settings("sentinel://s1", redis_sentinel_retry_s=window_s))[
        "task_publish_retry_policy"
    ]
    sleeps = fxrange(
        policy["interval_start"],
        policy["interval_max"] + policy["interval_start"],
        policy["interval_step"],
        repeatlast=True,
    )
    waits = [min(s, policy["interval_max"]) for s in itertools.islice(sleeps, policy["max_retries"])]
    assert sum(waits) >= window_s
    assert sum(waits[:-1]) < window_s


@given(st.floats(0.1, 3.0), st.floats(0.01, 1.0), st.floats(0.01, 600.0))
def test_retries_for_a_window(cap: float, base: float, window_s: float) -> None:
    backoff = ExponentialBackoff(cap=cap, base=base)
    retries = retries_for(backoff, window_s)
    waits = [backoff.compute(i) for i in range(1, retries + 1)]
    assert sum(waits) >= window_s or retries == 1000
    assert sum(waits[:-1]) < window_s


def test_sentinel_clients_are_built_from_the_url_and_settings() -> None:
    url = "sentinel://:pw@127.0.0.1:1/4;sentinel://127.0.0.1:2"
    settings = sentinel_settings(url, redis_sentinel_master="ha", redis_sentinel_retry_s=30.0)
    client = redis_client(settings=settings, decode_responses=True)
    try:
        assert isinstance(client, SentinelRedis)
        pool = client.connection_pool
        assert pool.service_name == "ha"
        assert pool.connection_class is MasterConnection
        assert {k: pool.connection_kwargs[k] for k in ("db", "password", "decode_responses")} == {
            "db": 4,
            "password": "pw",
            "decode_responses": True,
        }
        retry = pool.connection_kwargs["retry"]
        assert retry.get_retries() == retries_for(retry._backoff, 30.0) > 8
        assert [s.connection_pool.connection_kwargs["port"] for s in pool.sentinel_manager.sentinels] == [
            1,
            2,
        ]
    finally:
        client.close()

    async def build() -> aioredis.Redis:
        async_client = async_redis_client(url, settings=settings)
        await async_client.aclose()
        return async_client

    async_client = asyncio.run(build())
    assert isinstance(async_client, AsyncSentinelRedis)
    assert async_client.connection_pool.connection_class is AsyncMasterConnection
    assert async_client.connection_pool.connection_kwargs["db"] == 4


def test_plain_urls_are_from_url_with_the_settings_retries() -> None:
    client = redis_client("redis://127.0.0.1:1/2")
    assert type(client) is redis.Redis
    assert client.connection_pool.connection_kwargs["db"] == 2
    assert client.connection_pool.connection_kwargs["retry"].get_retries() == 8
    client.close()


@pytest.mark.parametrize(
    ("message", "refused"),
    [
        ("NOREPLICAS Not enough good replicas to write.", True),
        ("READONLY You can't write against a read only replica.", True),
        ("Command # 2 (SET a b) of pipeline caused error: NOREPLICAS Not enough good replicas", True),
        (  # Redis 6.2 inside a Lua script
            "Error running script (call to f_e0209): @user_script:3: @user_script: 3: "
            "-NOREPLICAS Not enough good replicas to write.",
            True,
        ),
        ("NOREPLICAS Not enough good replicas to write. script: e0209, on @user_script:3.", True),
        ("WRONGTYPE Operation against a key holding the wrong kind of value", False),
        ("NOSCRIPT No matching script. Please use EVAL.", False),
        ("ERR value is not an integer or out of range", False),
        ("ERR unknown command 'NOREPLICAS', with args beginning with:", False),
    ],
)
def test_which_errors_are_refused_writes(message: str, refused: bool) -> None:
    error = _refused(ResponseError(message))
    assert (error is not None) is refused
    if error is not None:
        assert isinstance(error, redis.ConnectionError)
        assert str(error) == message
