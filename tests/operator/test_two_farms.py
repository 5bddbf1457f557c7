"""Two farms on one host, each with its own Redis, complete their batches without touching each other."""

from __future__ import annotations

import contextlib
from pathlib import Path

import httpx
import pytest

from farm.launcher import LocalFarm, WorkerSpec
from tests.integration.jobs import submit, wait_state

pytestmark = [pytest.mark.integration, pytest.mark.slow]
TERMINAL = {"done", "failed", "cancelled", "timeout"}


def small_farm() -> LocalFarm:
    return LocalFarm(
        workers=[
            WorkerSpec("init", concurrency=2),
            WorkerSpec("run", concurrency=4),
            WorkerSpec("eval", concurrency=2),
        ],
        env={"FARM_ORPHAN_GRACE_S": "0"},  # each farm's sweep would stop the other's sandboxes at once
    )


def test_two_farms_share_a_host(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("FARM_WORKDIR", "")  # each farm picks its own default scratch dir
    with contextlib.ExitStack() as stack:
        farms = [stack.enter_context(small_farm()) for _ in range(2)]
        assert farms[0].id != farms[1].id
        assert farms[0].scratch_dir != farms[1].scratch_dir
        workers = [{row[2] for row in f.table() if row[0].startswith("worker-")} for f in farms]
        assert not workers[0] & workers[1]
        jobs: list[tuple[LocalFarm, str]] = []
        clients = [stack.enter_context(httpx.Client(base_url=f.api_url, timeout=30)) for f in farms]
        for farm, api in zip(farms, clients, strict=True):
            for i in range(4):
                instance = {
                    "handler": "math",
                    "question": f"What is {i} + 2?",
                    "answer": i + 2,
                }  # a number, as JSON allows
                jobs.append((farm, submit(api, instance)))
        for farm, job_id in jobs:
            api = clients[farms.index(farm)]
            result = wait_state(api, job_id, TERMINAL, timeout_s=90)
            assert result.state.value == "done", result.error
            assert result.error is None
            assert result.reward is not None
        for farm in farms:
            assert Path(farm.scratch_dir, "sandboxes").is_dir()
