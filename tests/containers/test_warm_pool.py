"""The warm pool with real sandboxes: a claim is atomic under concurrency, a pooled sandbox is handed
over fresh and labelled as its claimer's and never reused, idle ones are stopped, and the sandboxes of a
pool whose process was killed are stopped by the orphan sweep."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from containers import workspace_fs
from containers.errors import ExecServerError
from containers.local import CLAIM_FILE, LocalRuntime, read_recorded, record_claim
from containers.sandbox import Sandbox
from containers.spec import SandboxSpec
from containers.warm_pool import DEMAND_TO_POOL, OWNER_LABEL, WarmPool, owner_alive, pool_key
from tasks.orphans import _scan, _stop_ownerless
from tests.waiting import wait_until

from .conftest import requires_bwrap

pytestmark = requires_bwrap
SPEC = SandboxSpec(die_with_parent=False, ttl_s=300, labels={"job_id": "first", "farm_id": "f1"})


def _for(job: str, ttl_s: float = 300) -> SandboxSpec:
    return SPEC.model_copy(update={"labels": {"job_id": job, "farm_id": "f1"}, "ttl_s": ttl_s})


def _filled(root: Path, budget: int) -> WarmPool:
    """A pool holding `budget` started sandboxes; stopped, its unmounts done, if it cannot be filled (a
    sandbox left running would keep its workspace filesystem mounted under `root`)."""
    pool = WarmPool(LocalRuntime(root), idle_s=60, shared_labels=("farm_id",))
    try:
        for i in range(DEMAND_TO_POOL):  # the demand that makes the spec worth pooling; started cold
            assert pool.claim(_for(f"learn-{i}")) is None
        pool.set_budget(budget)
        while pool.fill():
            pass
        assert pool.counts()["ready"] == budget
    except BaseException:
        pool.close()
        workspace_fs.drain()
        raise
    return pool


def test_pool_key_ignores_labels_and_ttl_only() -> None:
    assert pool_key(_for("a", 10)) == pool_key(_for("b", 99))
    assert pool_key(SPEC) != pool_key(SPEC.model_copy(update={"network": True}))
    assert pool_key(SPEC) != pool_key(SPEC.model_copy(update={"env": {"X": "1"}}))


def test_concurrent_claims_never_share_a_sandbox(tmp_path: Path) -> None:
    pool = _filled(tmp_path, budget=8)
    claimed: list[Sandbox | None] = []
    barrier = threading.Barrier(32)

    def claim(i: int) -> None:
        barrier.wait()
        claimed.append(pool.claim(_for(f"job-{i}")))

    threads = [threading.Thread(target=claim, args=(i,)) for i in range(32)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    got = [s for s in claimed if s is not None]
    try:
        assert len(got) == 8 and len({s.id for s in got}) == 8  # 8 sandboxes, 8 claimers, 24 misses
        assert pool.counts()["hits"] == 8 and pool.counts()["ready"] == 0
        for sandbox in got:  # each labelled as its own claimer's, on disk too (what the sweep reads)
            recorded = read_recorded(Path(sandbox.info.sandbox_dir))
            assert recorded.labels == sandbox.info.labels and OWNER_LABEL not in recorded.labels
        assert len({s.info.labels["job_id"] for s in got}) == 8
    finally:
        for sandbox in got:
            sandbox.stop()
        pool.close()


def test_a_claimed_sandbox_is_fresh_gets_its_ttl_and_is_never_pooled_again(tmp_path: Path) -> None:
    pool = _filled(tmp_path, budget=2)
    first = pool.claim(_for("one", ttl_s=3))
    assert first is not None
    try:
        assert first.exec("ls -A /workspace; echo $FARM_SANDBOX_ID").stdout.split() == [first.id]
        first.exec("echo secret > /workspace/left-behind")
        assert first.id not in pool.pooled_ids()
        # the pool's keeper sends the claim's TTL (the pool started it with the idle bound plus a margin)
        assert pool.settle() == 1 and pool.settle() == 0
        wait_until(lambda: not first.ping(), 15, interval_s=0.2, what="the claimed sandbox's TTL")
        second = pool.claim(_for("two"))
        assert second is not None and second.id != first.id
        assert second.exec("ls -A /workspace").stdout == ""
        # a claim is recorded once, on disk too: a second claim of the same sandbox is refused
        assert (Path(second.info.sandbox_dir) / CLAIM_FILE).exists()
        assert record_claim(second.info) is False
        second.stop()
        assert pool.claim(_for("three")) is None  # empty: nothing returns to the pool
    finally:
        first.stop()
        pool.close()
    workspace_fs.drain()  # workspaces on their own filesystem are removed in the background
    assert list(tmp_path.iterdir()) == []


def test_idle_sandboxes_are_stopped(tmp_path: Path) -> None:
    pool = _filled(tmp_path, budget=2)
    # The idle bound shortened once the pool is full: under it, a start slower than the bound (a loaded
    # host) ended the fill early, and the failed test left that sandbox running and its workspace mounted.
    pool.idle_s = 1.0
    ids = pool.pooled_ids()
    try:
        time.sleep(1.2)
        assert pool.stop_idle() == 2
        assert pool.counts()["ready"] == 0 and pool.counts()["expired"] == 2
        assert not any((tmp_path / i).exists() for i in ids)
        assert pool.fill() is False  # the spec was not claimed within the idle bound: no longer pooled
    finally:
        pool.close()
    workspace_fs.drain()  # workspaces on their own filesystem are removed in the background
    assert list(tmp_path.iterdir()) == []


def test_a_dead_pooled_sandbox_is_never_handed_out(tmp_path: Path) -> None:
    pool = _filled(tmp_path, budget=2)
    victim = pool.pooled_ids()[0]
    handle = read_recorded(tmp_path / victim)
    os.kill(handle.init_pid or 0, signal.SIGKILL)
    wait_until(lambda: not Sandbox(handle, pool.runtime).ping(), 10, what="the pooled sandbox dead")
    got = pool.claim(_for("after-kill"))
    try:
        assert got is not None and got.id != victim and got.ping()
        assert pool.counts()["failed"] == 1 and not (tmp_path / victim).exists()
    finally:
        if got is not None:
            got.stop()
        pool.close()


OWNER = r"""
import sys, time
from pathlib import Path
from containers.local import LocalRuntime
from containers.spec import SandboxSpec
from containers.warm_pool import WarmPool
pool = WarmPool(LocalRuntime(Path(sys.argv[1])), idle_s=60)
spec = SandboxSpec(die_with_parent=False, ttl_s=300, labels={"job_id": "x"})
pool.claim(spec); pool.claim(spec)
pool.set_budget(3)
while pool.fill():
    pass
print(pool.owner, flush=True)
time.sleep(600)
"""


def test_the_pool_of_a_killed_process_is_stopped_by_the_sweep(tmp_path: Path) -> None:
    owner = subprocess.Popen([sys.executable, "-c", OWNER, str(tmp_path)], stdout=subprocess.PIPE, text=True)
    try:
        assert owner.stdout is not None
        token = owner.stdout.readline().strip()
        runtime = LocalRuntime(tmp_path)
        handles, _ = _scan(tmp_path)
        assert len(handles) == 3 and {h.labels[OWNER_LABEL] for h in handles} == {token}
        assert _stop_ownerless(runtime, handles) == 0  # its owner lives: left alone
    finally:
        owner.send_signal(signal.SIGKILL)
        owner.wait(10)
    assert not owner_alive(token)
    # die_with_parent=False, as the farm's sandboxes are: they outlive their starter...
    assert all(Sandbox(h, runtime).ping() for h in handles)
    # ...until the sweep finds their owner gone
    assert _stop_ownerless(runtime, _scan(tmp_path)[0]) == 3
    workspace_fs.drain()
    assert list(tmp_path.iterdir()) == []
    for handle in handles:
        with pytest.raises(ExecServerError):
            Sandbox(handle, runtime).client.call_once("ping", timeout=1)
