"""The warm pool in a farm of real processes: the init worker pools sandboxes for the spec its jobs ask
for, jobs claim them (counted in /metrics and /status), and when the init worker is SIGKILLed the orphan
sweep of another worker on the node stops every sandbox its pool held: none is left."""

from __future__ import annotations

import re
import signal
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from containers import procs
from containers.local import read_recorded
from containers.warm_pool import OWNER_LABEL
from farm.embedded_redis import EmbeddedRedis
from farm.launcher import LocalFarm, WorkerSpec
from tests.integration.jobs import wait_state
from tests.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

MATH = {"handler": "math", "question": "What is 84 * 76 + 123?", "answer": "6507"}
TERMINAL = {"done", "failed", "cancelled", "timeout"}


def _farm(server: EmbeddedRedis, logs: Path) -> LocalFarm:
    return LocalFarm(
        redis_url=server.url,
        workers=[WorkerSpec("init", concurrency=2), WorkerSpec("run", concurrency=4), WorkerSpec("eval")],
        llm_servers=1,
        llm_args=["--accuracy", "1"],
        env={
            "FARM_WORKDIR": str(logs / "work"),
            "FARM_WARM_POOL": "4",
            "FARM_WARM_POOL_IDLE_S": "120",
            "FARM_ORPHAN_GRACE_S": "1",
        },
        log_dir=logs,
    )


@pytest.fixture(scope="module")
def warm_farm() -> Iterator[LocalFarm]:
    logs = Path(tempfile.mkdtemp(prefix="farm-warm-"))
    server = EmbeddedRedis().start()
    farm = _farm(server, logs)
    farm.start(timeout_s=120)
    farm.workdir = logs / "work"  # type: ignore[attr-defined]
    yield farm
    farm.stop()
    server.stop()


@pytest.fixture
def wapi(warm_farm: LocalFarm) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=warm_farm.api_url, timeout=60) as client:
        yield client


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


def test_jobs_claim_pooled_sandboxes(wapi: httpx.Client) -> None:
    assert _run(wapi, 2) == ["done", "done"]  # the spec is learnt (two cold starts)
    filled = lambda: _metric(wapi, "farm_warm_sandboxes")  # noqa: E731
    wait_until(filled, 60, accept=lambda n: n >= 2, what="a filled pool")
    assert _run(wapi, 6) == ["done"] * 6
    wait_until(lambda: _metric(wapi, "farm_warm_claims_total"), 15, accept=lambda n: n >= 2, what="claims")
    workers = wapi.get("/status").json()["workers"]
    pools = [w["warm_pool"] for w in workers if w.get("warm_pool")]
    assert len(pools) == 1 and pools[0]["hits"] >= 2  # only the init worker owns a pool


def test_a_killed_init_worker_leaves_no_pooled_sandbox(warm_farm: LocalFarm, wapi: httpx.Client) -> None:
    workdir = Path(warm_farm.workdir)  # type: ignore[attr-defined]
    wait_until(lambda: _pooled(workdir), 60, accept=lambda p: len(p) >= 2, what="pooled sandboxes")
    handles = [read_recorded(workdir / "sandboxes" / i) for i, _ in _pooled(workdir)]
    warm_farm.kill("worker-init-0", signal.SIGKILL)
    # the run and eval workers' orphan sweeps (one every 10 s per host) find the owner gone
    wait_until(lambda: _pooled(workdir), 45, accept=lambda p: not p, interval_s=0.5, what="the pool stopped")
    assert not [h.id for h in handles if procs.is_same_process(h.init_pid, h.init_start)]
    assert not [h.id for h in handles if Path(h.sandbox_dir).exists()]


def test_a_stopped_farm_leaves_no_pooled_sandbox() -> None:
    """SIGTERM: the init worker stops its pool on its way out (what it cannot finish within its stop
    deadline would be a dead owner's pool, for the next sweep)."""
    logs = Path(tempfile.mkdtemp(prefix="farm-warm-stop-"))
    server = EmbeddedRedis().start()
    farm = _farm(server, logs)
    try:
        farm.start(timeout_s=120)
        with httpx.Client(base_url=farm.api_url, timeout=60) as api:
            assert _run(api, 2) == ["done", "done"]
        wait_until(lambda: _pooled(logs / "work"), 60, accept=lambda p: len(p) >= 2, what="pooled sandboxes")
        handles = [read_recorded(logs / "work" / "sandboxes" / i) for i, _ in _pooled(logs / "work")]
    finally:
        farm.stop()
        server.stop()
    assert not [h.id for h in handles if procs.is_same_process(h.init_pid, h.init_start)]
    assert not _pooled(logs / "work")
