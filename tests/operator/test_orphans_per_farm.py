"""The orphan sweep of one farm leaves another farm's sandboxes on the same host alone."""

from __future__ import annotations

from pathlib import Path

import redis

from containers import SandboxSpec
from containers.local import LocalRuntime
from farm.identity import FARM_LABEL, current_farm_id
from farm.jobs.store import JobStore
from tasks.orphans import sweep_orphan_sandboxes


def test_sweep_stops_only_its_own_farms_orphans(redis_client: redis.Redis, tmp_path: Path) -> None:
    runtime = LocalRuntime(tmp_path / "sandboxes")
    # Neither job is known to this farm's Redis: to this farm both look orphaned.
    ours = runtime.start(
        SandboxSpec(die_with_parent=False, ttl_s=60, labels={"job_id": "j1", FARM_LABEL: current_farm_id()})
    )
    theirs = runtime.start(
        SandboxSpec(die_with_parent=False, ttl_s=60, labels={"job_id": "j2", FARM_LABEL: "0therfarm"})
    )
    try:
        stopped = sweep_orphan_sandboxes(JobStore(redis_client, 60), root=tmp_path / "sandboxes", grace_s=0)
        assert stopped == 1
        assert not ours.ping()
        assert theirs.ping()
    finally:
        ours.stop()
        theirs.stop()


def test_sweep_removes_a_directory_whose_starter_died_before_recording_it(
    redis_client: redis.Redis, tmp_path: Path
) -> None:
    """A worker SIGKILLed between making a sandbox's directory and writing its handle (seen in the chaos
    run: an empty handle.json) leaves nothing any sweep could read; no process of it ever started."""
    root = tmp_path / "sandboxes"
    (root / "deadbeef0001" / "workspace").mkdir(parents=True)
    (root / "deadbeef0001" / "handle.json").write_text("")
    (root / "deadbeef0002" / "workspace").mkdir(parents=True)  # no handle file at all
    store = JobStore(redis_client, 60)
    assert sweep_orphan_sandboxes(store, root=root, grace_s=3600) == 0  # too young: maybe starting now
    assert sweep_orphan_sandboxes(store, root=root, grace_s=0) == 2
    assert list(root.iterdir()) == []
