"""The real API (uvicorn, its own process) on a private Redis, with no workers: what these tests send
is judged at the door, and an accepted job just waits in its queue."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import httpx
import pytest

from farm.embedded_redis import EmbeddedRedis
from farm.launcher import LocalFarm
from tests.farms import temp_farm


def _start(redis_server: EmbeddedRedis, **env: str) -> LocalFarm:
    local = temp_farm("farm-api-test-", redis_url=redis_server.url, workers=[], llm_policy=None, env=env)
    return local.start(30)


@pytest.fixture
def api(api_farm: LocalFarm) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=api_farm.api_url, timeout=30) as client:
        yield client


@pytest.fixture(scope="session")
def start_api(redis_server: EmbeddedRedis) -> Iterator[Callable[..., LocalFarm]]:
    """Another API process with its own FARM_* settings (stopped at the end of the session)."""
    started: list[LocalFarm] = []

    def start(**env: str) -> LocalFarm:
        started.append(_start(redis_server, **env))
        return started[-1]

    yield start
    for local in started:
        local.stop()
