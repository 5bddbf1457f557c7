"""Farm jobs against backends that end requests as the real servers can: an SGLang backend that aborts
every request is failed over (the job ends `done` on another backend), and a vLLM backend whose
repetition detector ends every request still ends the job `done`."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from farm.launcher import LocalFarm, WorkerSpec
from farm.models.results import JobResult, JobState
from tests.integration.jobs import submit, wait_state
from tests.model_side.conftest import ServerProcess

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # a whole farm

WINDOW = ["--policy", "scripted", "--max-model-len", "4096"]


@pytest.fixture(scope="module")
def farm() -> Iterator[LocalFarm]:
    logs = Path(tempfile.mkdtemp(prefix="farm-finish-faults-"))
    workers = [
        WorkerSpec("init", concurrency=2),
        WorkerSpec("run", concurrency=2),
        WorkerSpec("eval", concurrency=2),
    ]
    local = LocalFarm(workers=workers, llm_servers=1, env={"FARM_WORKDIR": str(logs / "work")}, log_dir=logs)
    local.start(timeout_s=120)
    yield local
    local.stop()


@pytest.fixture(scope="module")
def faulty() -> Iterator[dict[str, ServerProcess]]:
    started = {
        "abort": ServerProcess([*WINDOW, "--emulate", "sglang", "--finish-faults", "abort=1"]),
        "repetition": ServerProcess([*WINDOW, "--emulate", "vllm", "--finish-faults", "repetition=1"]),
    }
    yield {name: server.wait_ready() for name, server in started.items()}
    for server in started.values():
        server.stop()


def _backends(api: httpx.Client, *backends: tuple[str, str]) -> None:
    api.post("/clear_llm_server").raise_for_status()
    for address, kind in backends:
        api.post("/add_llm_server", json={"address": address, "kind": kind}).raise_for_status()


def test_an_aborting_backend_is_failed_over(farm: LocalFarm, faulty: dict[str, ServerProcess]) -> None:
    aborting, healthy = faulty["abort"].address, farm.llm_urls[0]
    with httpx.Client(base_url=farm.api_url, timeout=60) as api:
        _backends(api, (aborting, "sglang"), (healthy, "vllm"))  # the first added is picked first
        job_id = submit(api, {"handler": "noop", "generate_tokens": 8})
        result: JobResult = wait_state(api, job_id, {"done", "failed"}, 60)
        assert result.state is JobState.done, result.error
        assert result.artifacts["backend"] == healthy
        listed = {b["address"]: b for b in api.get("/llm_servers").json()}
        assert listed[aborting]["kind"] == "sglang"
    assert farm.log_dir is not None
    logs = "".join(path.read_text(errors="replace") for path in farm.log_dir.glob("worker-run*.log"))
    assert f"backend {aborting} failed for" in logs and "finish_reason 'abort'" in logs


def test_a_repetition_finish_ends_the_job_normally(farm: LocalFarm, faulty: dict[str, ServerProcess]) -> None:
    with httpx.Client(base_url=farm.api_url, timeout=60) as api:
        _backends(api, (faulty["repetition"].address, "vllm"))
        job_id = submit(api, {"handler": "noop", "generate_tokens": 8})
        result = wait_state(api, job_id, {"done", "failed"}, 60)
        assert result.state is JobState.done, result.error
        assert result.artifacts["backend"] == faulty["repetition"].address
        assert result.artifacts["sampled_tokens"] > 0
