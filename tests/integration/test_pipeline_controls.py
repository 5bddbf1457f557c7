"""Staged pipeline controls on a farm of real processes: the READY buffer holds init back while run is
the bottleneck, init takes urgent jobs first, and sandboxes orphaned by a dead init are stopped."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import redis

from containers import SandboxSpec
from containers.local import LocalRuntime
from farm import keys
from farm.launcher import LocalFarm
from tests.farms import stage_workers, temp_farm
from tests.integration.jobs import wait_state
from tests.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # the CI slow step

READY_BUFFER = 2
MATH = {"handler": "math", "question": "What is 84 * 76 + 123?", "answer": "6507"}
TERMINAL = {"done", "failed", "cancelled", "timeout"}


@pytest.fixture(scope="module")
def farm() -> Iterator[LocalFarm]:
    """One init and one run slot, a slow model (run is the bottleneck), a READY buffer of 2."""
    farm = temp_farm(
        "farm-pipeline-",
        workers=stage_workers(1, 1),
        llm_args=["--accuracy", "1", "--token-latency-ms", "12"],
        env={"FARM_READY_BUFFER": str(READY_BUFFER), "FARM_ORPHAN_GRACE_S": "1"},
    )
    with farm.start(timeout_s=90):
        yield farm


def _submit(api: httpx.Client, name: str, priority: int = 0) -> str:
    job_id = f"{name}-{uuid.uuid4().hex[:8]}"
    body = {"instance": MATH, "job_id": job_id, "wait": False, "priority": priority}
    assert api.post("/process", json=body).status_code == 202
    return job_id


def _wait_all(api: httpx.Client, job_ids: list[str], timeout_s: float = 120) -> list[str]:
    """Waits until every job is terminal; returns the ids in the order they were seen finishing."""
    order: list[str] = []

    def ended() -> list[str]:
        for job_id in job_ids:
            if job_id not in order and api.get(f"/jobs/{job_id}").json()["state"] in TERMINAL:
                order.append(job_id)
        return order

    return wait_until(
        ended,
        timeout_s,
        accept=lambda seen: len(seen) == len(job_ids),
        interval_s=0.05,
        what="every job ended",
    )


def test_ready_buffer_bounds_prepared_sandboxes(api: httpx.Client) -> None:
    held: list[int] = []
    stop = threading.Event()

    def watch() -> None:
        with httpx.Client(base_url=str(api.base_url), timeout=10) as client:
            while not stop.is_set():  # a sample every 50 ms until told to stop
                held.append(sum(client.get("/status").json()["ready"].values()))
                stop.wait(0.05)

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    jobs = [_submit(api, "ready") for _ in range(6)]
    try:
        assert len(_wait_all(api, jobs)) == len(jobs)
    finally:
        stop.set()
        watcher.join()
    results = [api.get(f"/jobs/{j}").json() for j in jobs]
    assert [r["state"] for r in results] == ["done"] * len(jobs)
    assert max(held) == READY_BUFFER  # run lagged, so the buffer filled, and it never overflowed
    assert held[-1] == 0  # every slot was given back
    # Waiting for a slot is queueing: it lands in `queued`, never in the init stage's time.
    waited = max(r["timings"]["queued"] for r in results)
    assert waited > 1.0
    assert max(r["timings"]["init"] for r in results) < waited


def test_init_takes_urgent_jobs_first(api: httpx.Client) -> None:
    normal = [_submit(api, "normal") for _ in range(6)]
    # the normal jobs are queued behind the full buffer (jobs past init hold every READY slot)
    wait_until(
        lambda: sum(api.get("/status").json()["ready"].values()),
        30,
        accept=lambda held: held == READY_BUFFER,
        interval_s=0.02,
        what="a full READY buffer",
    )
    urgent = _submit(api, "urgent", priority=9)
    order = _wait_all(api, [*normal, urgent])
    assert len(order) == 7
    # Ahead of it finish only jobs already past the init queue: one running, READY_BUFFER prepared and
    # one that the init worker holds while it waits for a slot; every other normal job comes after.
    assert order.index(urgent) <= READY_BUFFER + 2, order


def test_orphaned_sandbox_is_stopped(farm: LocalFarm, api: httpx.Client) -> None:
    runtime = LocalRuntime(Path(farm.scratch_dir) / "sandboxes")
    finished = _submit(api, "finished")
    assert wait_state(api, finished, TERMINAL, timeout_s=60).state.value == "done"
    # As if init of these jobs had been killed right after starting their sandboxes:
    ghost = runtime.start(SandboxSpec(die_with_parent=False, ttl_s=600, labels={"job_id": "never-submitted"}))
    stale = runtime.start(SandboxSpec(die_with_parent=False, ttl_s=600, labels={"job_id": finished}))
    # ...and one that a live job still records as its own is left alone.
    client = redis.Redis.from_url(farm.redis_url, decode_responses=True)
    owned_id = f"owned-{uuid.uuid4().hex[:6]}"
    owned = runtime.start(SandboxSpec(die_with_parent=False, ttl_s=600, labels={"job_id": owned_id}))
    client.hset(
        keys.job(owned_id),
        mapping={"state": "run", "init_state": json.dumps({"sandbox": owned.handle()})},
    )
    try:
        wait_until(
            lambda: not ghost.ping() and not stale.ping(), 30, interval_s=0.1, what="the orphans stopped"
        )
        assert not Path(ghost.info.sandbox_dir).exists()
        assert owned.ping()
    finally:
        client.delete(keys.job(owned_id))
        client.close()
        for sandbox in (ghost, stale, owned):
            sandbox.stop()
