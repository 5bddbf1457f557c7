"""A whole farm for integration tests: private redis-server, the API over HTTP, three Celery
workers (one per queue) and three reference LLM servers, all real processes."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from farm.embedded_redis import EmbeddedRedis
from farm.launcher import LocalFarm
from handlers.harness.clis import cli_cache
from tests.farms import emptied, stage_workers, temp_farm


@pytest.fixture(scope="module", params=["vllm", "sglang"])
def emulated_kind(request: pytest.FixtureRequest) -> str:
    """The server a module's own farm emulates (`farm.llm --emulate`): each of its tests runs on both."""
    return str(request.param)


@pytest.fixture(scope="session")
def host_files_root() -> Path:
    """Where the farm lets `upload` steps copy from (FARM_HOST_FILE_ROOTS): readable by the sandbox's user."""
    root = Path(tempfile.mkdtemp(prefix="farm-host-files-"))
    root.chmod(0o755)
    return root


@pytest.fixture(scope="session")
def farm(
    session_farm_redis: EmbeddedRedis, host_files_root: Path, host_file_roots: str
) -> Iterator[LocalFarm]:
    local = temp_farm(
        "farm-test-logs-",
        redis_url=emptied(session_farm_redis.url),
        workers=stage_workers(4, 12),
        llm_servers=3,
        # A per-token latency makes concurrent rollouts overlap, as they do against a real model.
        llm_args=["--accuracy", "0.5", "--seed", "7", "--token-latency-ms", "4"],
        # harness CLIs the tests install from npm live in a cache under the home, which sandboxes
        # do not see unless it is granted (tests/integration/test_harness_cli.py)
        env={
            "FARM_HARNESS_CLI_DIRS": str(cli_cache()),
            # plus the session's temporary folders, where swe tests build their repositories
            "FARM_HOST_FILE_ROOTS": f"{host_files_root}:{host_file_roots}",
        },
    )
    with local.start(timeout_s=90):
        yield local
