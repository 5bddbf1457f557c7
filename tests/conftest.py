"""Shared fixtures. Every test that needs Redis gets a private redis-server, never the machine's own."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator

import pytest
import redis
from hypothesis import settings

from farm.embedded_redis import EmbeddedRedis

# CI replays the same examples every run (a failure there is reproducible, never a new random draw);
# local runs keep exploring new inputs.
settings.register_profile("ci", derandomize=True)
if os.environ.get("CI"):
    settings.load_profile("ci")


@pytest.fixture(scope="session")
def redis_server() -> Iterator[EmbeddedRedis]:
    server = EmbeddedRedis().start()
    yield server
    server.stop()


@pytest.fixture
def redis_url(redis_server: EmbeddedRedis) -> Iterator[str]:
    """A clean database on the session's private server."""
    client = redis.Redis.from_url(redis_server.url)
    client.flushdb()
    client.close()
    yield redis_server.url


@pytest.fixture
def redis_client(redis_url: str) -> Iterator[redis.Redis]:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    yield client
    client.close()


@pytest.fixture
def host_listener() -> Iterator[int]:
    """The port of a TCP service on the host's loopback, the kind a sandbox must not reach."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    yield server.getsockname()[1]
    server.close()
