"""Shared fixtures. Every test that needs Redis gets a private redis-server, never the machine's own."""

from __future__ import annotations

import os
import socket
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis
from hypothesis import settings

from farm.embedded_redis import EmbeddedRedis
from farm.launcher import LocalFarm
from tests.farms import emptied, temp_farm

# CI replays the same examples every run (a failure there is reproducible, never a new random draw);
# local runs keep exploring new inputs.
# No per-example deadline: the default run shares the cores between its test processes (xdist), and
# hypothesis's 200 ms took a 0.3 ms example for a failure at load 13 (FlakyFailure); pytest-timeout
# still bounds a hang.
settings.register_profile("parallel", deadline=None)
settings.register_profile("ci", derandomize=True, deadline=None)
settings.load_profile("ci" if os.environ.get("CI") else "parallel")


@pytest.fixture(scope="session", autouse=True)
def host_file_roots(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The tests' own temporary folders (pytest's base temp, where fixtures build sample repositories)
    are an allowed host-file root for this session, besides whatever FARM_HOST_FILE_ROOTS already says:
    swe `repo_path`s and `upload` steps must resolve inside one (handlers/host_files.py). The default
    stays empty; farms the tests start inherit this environment unless they set their own roots.
    Settings are cached (farm/settings.py `get_settings`): cleared so the next read sees it."""
    from farm.settings import get_settings

    before = os.environ.get("FARM_HOST_FILE_ROOTS")
    basetemp = str(tmp_path_factory.getbasetemp())
    os.environ["FARM_HOST_FILE_ROOTS"] = ":".join(r for r in (before, basetemp) if r)
    get_settings.cache_clear()
    yield os.environ["FARM_HOST_FILE_ROOTS"]
    if before is None:
        os.environ.pop("FARM_HOST_FILE_ROOTS", None)
    else:
        os.environ["FARM_HOST_FILE_ROOTS"] = before
    get_settings.cache_clear()


@pytest.fixture(scope="session")
def redis_server() -> Iterator[EmbeddedRedis]:
    server = EmbeddedRedis().start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def session_farm_redis() -> Iterator[EmbeddedRedis]:
    """A Redis of its own for a folder's session farm (integration's, ui's): its workers live as long as
    the test process, and under xdist that process also runs other folders' modules, whose `redis_url`
    (the session's server) those workers must never consume from."""
    server = EmbeddedRedis().start()
    yield server
    server.stop()


@pytest.fixture(scope="session")
def api_farm(redis_server: EmbeddedRedis) -> Iterator[LocalFarm]:
    """The real API (uvicorn, its own process, as `farm up` starts it) on the session's Redis, with no
    workers and no token: one process for every folder whose tests only talk to the API's door."""
    local = temp_farm(
        "farm-api-test-", redis_url=redis_server.url, workers=[], llm_policy=None, env={"FARM_API_TOKEN": ""}
    )
    with local.start(60):
        yield local


@pytest.fixture
def api(farm: LocalFarm) -> Iterator[httpx.Client]:
    """A client of the API of the `farm` in scope: the session farm of tests/integration or tests/ui, or
    the one a module starts for itself under that name. tests/api has its own, on `api_farm`."""
    with httpx.Client(base_url=farm.api_url, timeout=60) as client:
        yield client


TESTS = Path(__file__).resolve().parent
INTEGRATION_FOLDERS = [TESTS / "integration", TESTS / "ui"]


def pytest_itemcollected(item: pytest.Item) -> None:
    """Every test in these folders is an integration test (a `pytestmark` in their conftest would mark
    nothing: it applies to the module it is written in, and a conftest holds no test)."""
    inside = any(item.path.is_relative_to(folder) for folder in INTEGRATION_FOLDERS)
    if inside and item.get_closest_marker("integration") is None:
        item.add_marker(pytest.mark.integration)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """`-n auto` (pyproject's addopts): one test process per core this process may use (its affinity,
    not the machine's count: a `taskset` or a container's cpuset is what the tests get)."""
    return len(os.sched_getaffinity(0))


def _session_farm(item: pytest.Item) -> bool:
    """Whether the test uses a folder's session-scoped `farm` (not a module's own farm of that name)."""
    info = getattr(item, "_fixtureinfo", None)
    definitions = info.name2fixturedefs.get("farm", ()) if info is not None else ()
    return bool(definitions) and definitions[-1].scope == "session"


def xdist_group_of(item: pytest.Item) -> str:
    """The tests one xdist process runs together (pyproject runs them with `--dist loadgroup`): those
    of a folder that share its session farm (integration's, ui's: a farm per test process would cost
    its start in each), else a module (its module-scoped farms and sandboxes start once)."""
    for folder in INTEGRATION_FOLDERS:
        if item.path.is_relative_to(folder) and _session_farm(item):
            return f"farm-{folder.name}"
    return str(item.path.relative_to(TESTS))


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        if item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(xdist_group_of(item)))


@pytest.fixture
def redis_url(redis_server: EmbeddedRedis) -> str:
    """A clean database on the session's private server."""
    return emptied(redis_server.url)


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
