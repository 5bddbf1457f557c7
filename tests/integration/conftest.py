"""A whole farm for integration tests: private redis-server, the API over HTTP, three Celery
workers (one per queue) and three reference LLM servers, all real processes."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis

from farm.embedded_redis import EmbeddedRedis
from farm.launcher import LocalFarm, WorkerSpec
from handlers.harness.clis import cli_cache


@pytest.fixture(scope="session")
def host_files_root() -> Path:
    """Where the farm lets `upload` steps copy from (FARM_HOST_FILE_ROOTS): readable by the sandbox's user."""
    root = Path(tempfile.mkdtemp(prefix="farm-host-files-"))
    root.chmod(0o755)
    return root


@pytest.fixture(scope="session")
def farm(redis_server: EmbeddedRedis, host_files_root: Path, host_file_roots: str) -> Iterator[LocalFarm]:
    logs = Path(tempfile.mkdtemp(prefix="farm-test-logs-"))
    flush = redis.Redis.from_url(redis_server.url)
    flush.flushdb()  # whatever other suites left on the session's Redis (backends, jobs) is not ours
    flush.close()
    local = LocalFarm(
        redis_url=redis_server.url,
        workers=[
            WorkerSpec("init", concurrency=4),
            WorkerSpec("run", concurrency=12),
            WorkerSpec("eval", concurrency=4),
        ],
        llm_servers=3,
        # A per-token latency makes concurrent rollouts overlap, as they do against a real model.
        llm_args=["--accuracy", "0.5", "--seed", "7", "--token-latency-ms", "4"],
        # harness CLIs the tests install from npm live in a cache under the home, which sandboxes
        # do not see unless it is granted (tests/integration/test_harness_cli.py)
        env={
            "FARM_WORKDIR": str(logs / "work"),
            "FARM_HARNESS_CLI_DIRS": str(cli_cache()),
            # plus the session's temporary folders, where swe tests build their repositories
            "FARM_HOST_FILE_ROOTS": f"{host_files_root}:{host_file_roots}",
        },
        log_dir=logs,
    )
    local.start(timeout_s=90)
    yield local
    local.stop()


@pytest.fixture
def api(farm: LocalFarm) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=farm.api_url, timeout=60) as client:
        yield client


def pytest_itemcollected(item: pytest.Item) -> None:
    """Every test in this folder is an integration test (a `pytestmark` here would mark nothing: it
    applies to the module it is written in, and a conftest holds no test)."""
    if item.get_closest_marker("integration") is None:
        item.add_marker(pytest.mark.integration)
