"""The warm pool in a farm of real processes: the init worker pools sandboxes for the spec its jobs ask
for, jobs claim them (counted in /metrics and /status), and when the init worker is SIGKILLed the orphan
sweep of another worker on the node stops every sandbox its pool held: none is left."""

from __future__ import annotations

import re
import signal
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from containers import procs
from containers.local import read_recorded
from containers.warm_pool import OWNER_LABEL
from farm.launcher import LocalFarm
from tests.farms import stage_workers, temp_farm
from tests.integration.jobs import wait_state
from tests.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

MATH = {"handler": "math", "question": "What is 84 * 76 + 123?", "answer": "6507"}
TERMINAL = {"done", "failed", "cancelled", "timeout"}


def _farm(prefix: str) -> LocalFarm:
    return temp_farm(
        prefix,
        workers=stage_workers(2, 4),
        llm_args=["--accuracy", "1"],
        env={"FARM_WARM_POOL": "4", "FARM_WARM_POOL_IDLE_S": "120", "FARM_ORPHAN_GRACE_S": "1"},
    )


@pytest.fixture(scope="module")
def farm() -> Iterator[LocalFarm]:
    farm = _farm("farm-warm-")
    with farm.start(timeout_s=120):
        yield farm


def _metric(api: httpx.Client, name: str) -> float:
    found = re.findall(rf"^{name}\{{[^}}]*\}} ([0-9.e+]+)$", api.get("/metrics").text, re.M)
    return sum(float(v) for v in found)


def _run(api: httpx.Client, n: int) -> list[str]:
    jobs = []
    for _ in range(n):
        job_id = f"warm-{uuid.uuid4().hex[:8]}"
        body = {"instance": MATH, "job_id": job_id, "wait": False}
        assert api.post("/process", json=body).status_code == 202
        jobs.append(job_id)
    return [wait_state(api, j, TERMINAL, timeout_s=120).state.value for j in jobs]


def _pooled(workdir: Path) -> list[tuple[str, str]]:
    """(sandbox id, owner) of every unclaimed pooled sandbox under the node's sandboxes root."""
    found = []
    for directory in (workdir / "sandboxes").glob("*"):
        try:
            handle = read_recorded(directory)
        except (OSError, ValueError):
            continue
        if OWNER_LABEL in handle.labels:
            found.append((handle.id, handle.labels[OWNER_LABEL]))
    return found


def test_jobs_claim_pooled_sandboxes(api: httpx.Client) -> None:
    assert _run(api, 2) == ["done", "done"]  # the spec is learnt (two cold starts)
    filled = lambda: _metric(api, "farm_warm_sandboxes")  # noqa: E731
    wait_until(filled, 60, accept=lambda n: n >= 2, what="a filled pool")
    assert _run(api, 6) == ["done"] * 6
    wait_until(lambda: _metric(api, "farm_warm_claims_total"), 15, accept=lambda n: n >= 2, what="claims")
    workers = api.get("/status").json()["workers"]
    pools = [w["warm_pool"] for w in workers if w.get("warm_pool")]
    assert len(pools) == 1 and pools[0]["hits"] >= 2  # only the init worker owns a pool


def test_a_killed_init_worker_leaves_no_pooled_sandbox(farm: LocalFarm, api: httpx.Client) -> None:
    workdir = Path(farm.scratch_dir)
    wait_until(lambda: _pooled(workdir), 60, accept=lambda p: len(p) >= 2, what="pooled sandboxes")
    handles = [read_recorded(workdir / "sandboxes" / i) for i, _ in _pooled(workdir)]
    farm.kill("worker-init-0", signal.SIGKILL)
    # the run and eval workers' orphan sweeps (one every 10 s per host) find the owner gone
    wait_until(lambda: _pooled(workdir), 45, accept=lambda p: not p, interval_s=0.5, what="the pool stopped")
    assert not [h.id for h in handles if procs.is_same_process(h.init_pid, h.init_start)]
    assert not [h.id for h in handles if Path(h.sandbox_dir).exists()]


def test_a_stopped_farm_leaves_no_pooled_sandbox() -> None:
    """SIGTERM: the init worker stops its pool on its way out (what it cannot finish within its stop
    deadline would be a dead owner's pool, for the next sweep)."""
    farm = _farm("farm-warm-stop-")
    workdir = Path(farm.scratch_dir)
    with farm.start(timeout_s=120):
        with httpx.Client(base_url=farm.api_url, timeout=60) as api:
            assert _run(api, 2) == ["done", "done"]
        wait_until(lambda: _pooled(workdir), 60, accept=lambda p: len(p) >= 2, what="pooled sandboxes")
        handles = [read_recorded(workdir / "sandboxes" / i) for i, _ in _pooled(workdir)]
    assert not [h.id for h in handles if procs.is_same_process(h.init_pid, h.init_start)]
    assert not _pooled(workdir)
