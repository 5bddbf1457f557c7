"""Infrastructure failures never become rewards: a sandbox killed from outside while the hidden tests run
(the OOM killer, a node's sweep, a lost server) graded nothing, so the tests run again in a fresh sandbox
and the job ends with the solution's true reward (real farm: API, Celery workers, reference LLM,
bubblewrap sandboxes).

Before, the code handler turned the eval sandbox's lost execution server into "every test failed", and
the job ended done with reward 0.0 for a correct solution: a fake zero a trainer would learn from.
"""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from farm.embedded_redis import EmbeddedRedis
from farm.launcher import LocalFarm
from farm.models.results import JobState
from tests.farms import emptied, stage_workers, temp_farm
from tests.integration.jobs import submit, wait_state
from tests.integration.test_handler_code import SAMPLING, instance, seed_for
from tests.waiting import wait_until

pytestmark = pytest.mark.slow

SLOW_TEST = "\n\ndef test_takes_its_time():\n    import time\n    time.sleep(5)\n"
"""A hidden test that keeps the eval sandbox busy long enough to be killed mid-run."""


@pytest.fixture(scope="module")
def small_farm(redis_server: EmbeddedRedis) -> Iterator[tuple[LocalFarm, Path]]:
    local = temp_farm(
        "farm-infra-",
        redis_url=emptied(redis_server.url),
        workers=stage_workers(1, 2, 1),
        llm_args=["--accuracy", "0.5", "--seed", "7"],
    )
    with local.start(timeout_s=180):
        yield local, Path(local.scratch_dir)


def _eval_sandbox(workdir: Path, job_id: str) -> dict[str, object] | None:
    for handle_file in (workdir / "sandboxes").glob("*/handle.json"):
        try:
            handle = json.loads(handle_file.read_text())
        except (OSError, ValueError):
            continue
        labels = handle.get("labels") or {}
        if labels.get("job_id") == job_id and labels.get("stage") == "eval" and handle.get("init_pid"):
            return handle
    return None


def test_a_sandbox_killed_mid_eval_is_not_a_zero(
    small_farm: tuple[LocalFarm, Path],
) -> None:
    farm, workdir = small_farm
    code = instance("median")
    code = {**code, "hidden_tests": code["hidden_tests"] + SLOW_TEST, "test_timeout_s": 120}
    with httpx.Client(base_url=farm.api_url, timeout=60) as api:
        job_id = submit(api, code, sampling_params={**SAMPLING, "seed": seed_for("median", True)})
        handle = wait_until(
            lambda: _eval_sandbox(workdir, job_id), 180, what=f"the eval sandbox of {job_id}", interval_s=0.05
        )
        init_pid = handle["init_pid"]
        assert isinstance(init_pid, int)
        wait_until(  # the hidden tests are running: the runner is a process of the sandbox
            lambda: any(_child_of(pid, init_pid) for pid in _pids()),
            60,
            what="the hidden tests to start",
            interval_s=0.05,
        )
        os.kill(init_pid, signal.SIGKILL)  # the sandbox dies from outside, as under the OOM killer
        result = wait_state(api, job_id, {"done", "failed", "cancelled", "timeout"}, timeout_s=120)
    assert result.state is JobState.done, (result.state, result.error)
    assert result.metadata["eval_sandbox_lost"] == 1, result.metadata
    assert result.reward == 1.0, result.metadata  # the correct solution's reward, not a fake 0
    assert result.metadata["tests_passed"] == result.metadata["tests_total"]


def _pids() -> list[int]:
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit()]


def _child_of(pid: int, parent: int) -> bool:
    """`pid` is a python process below `parent` (the runner of the hidden tests)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
    ppid = int(stat.rsplit(")", 1)[1].split()[1])
    return b"python3\x00-I\x00-c" in cmdline and _descends(ppid, parent)


def _descends(pid: int, ancestor: int) -> bool:
    for _ in range(16):
        if pid == ancestor:
            return True
        if pid <= 1:
            return False
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except OSError:
            return False
    return False
