"""Stops sandboxes on this node that no job needs any more.

A worker killed between starting a job's sandbox and recording it (init interrupted by SIGKILL) leaves
a sandbox that lives until its TTL: the job is re-sent and starts another. A sandbox labelled with a
job is kept while the job is not over and either some stage of it holds a live lease (it may be
starting or using the sandbox) or the job's recorded init state names this very sandbox; otherwise,
once older than a grace period, it is an orphan and is stopped. Local runtime only (Apptainer and
Docker sandboxes die with their TTL).

An unclaimed sandbox of a warm pool (containers/warm_pool.py) carries no job: it is stopped once the
process whose pool holds it is gone, at once (a dead owner can hand it to no one).
"""

from __future__ import annotations

import contextlib
import logging
import socket
import time
from pathlib import Path

from containers import workspace_fs
from containers.handle import SandboxHandle
from containers.local import LocalRuntime, default_root, read_recorded, remove_sandbox_dir, teardown_failure
from containers.runtime import Runtime, get_runtime
from containers.warm_pool import OWNER_LABEL, owner_alive
from farm import keys
from farm.identity import FARM_LABEL, current_farm_id
from farm.jobs.record import JobFields
from farm.jobs.store import JobStore
from farm.settings import get_settings

log = logging.getLogger(__name__)
SWEEP_EVERY_S = 10.0


def _scan(root: Path) -> tuple[list[SandboxHandle], list[Path]]:
    """The sandboxes under `root`, and the directories with no readable handle: a starter killed
    between making the directory and recording the handle (before any process of it started)."""
    found: list[SandboxHandle] = []
    unrecorded: list[Path] = []
    with contextlib.suppress(FileNotFoundError):
        for directory in root.iterdir():
            if directory.name.startswith(".") or not directory.is_dir():
                continue
            try:
                found.append(read_recorded(directory))
            except (OSError, ValueError):
                unrecorded.append(directory)
    return found, unrecorded


RETRY_FAILED_S = 3600.0
"""A sandbox directory whose removal failed (containers.local.TEARDOWN_FAILED, its cause logged once) is
retried this rarely, quietly unless the cause changes: not every sweep, forever, across restarts."""


def _failed_recently(directory: Path, now: float) -> bool:
    failure = teardown_failure(directory)
    return failure is not None and now - float(failure.get("at") or 0) < RETRY_FAILED_S


def _remove_unrecorded(directories: list[Path], older_than: float) -> int:
    removed = 0
    now = time.time()
    for directory in directories:
        with contextlib.suppress(OSError):
            if directory.stat().st_mtime >= older_than or _failed_recently(directory, now):
                continue
            if teardown_failure(directory) is None:
                log.warning("removing sandbox directory %s whose starter died before recording it", directory)
            if remove_sandbox_dir(directory) is None:
                removed += 1
    return removed


def is_orphan(handle: SandboxHandle, job: JobFields, now: float) -> bool:
    """Whether a labelled sandbox has outlived its job's need for it."""
    if job.over:
        return True
    if job.lease_expires > now:
        return False
    return job.sandbox_id != handle.id


def _stop_ownerless(runtime: Runtime, handles: list[SandboxHandle]) -> int:
    """Stops the unclaimed sandboxes of warm pools whose owning process is gone (killed, or exited
    before stopping them): no job knows them, and no one else ever will."""
    stopped = 0
    host = socket.gethostname()
    for handle in handles:
        owner = handle.labels.get(OWNER_LABEL)
        # a pid names a process of this node only (another node's sandbox is its own sweep's)
        if owner is None or handle.node != host or owner_alive(owner):
            continue
        stopped += _stop(runtime, handle, f"of the warm pool of a process that is gone ({owner})")
    return stopped


_reported: dict[str, str] = {}
"""Sandbox id -> the cause of its last failed stop, said once per process."""


def _stop(runtime: Runtime, handle: SandboxHandle, why: str) -> bool:
    """Stops one sandbox the sweep found; one log line, and a failure's cause said once. A sandbox whose
    directory could not be removed a moment ago is left alone until RETRY_FAILED_S has passed."""
    directory = Path(handle.sandbox_dir)
    if _failed_recently(directory, time.time()):
        return False
    retrying = teardown_failure(directory) is not None
    if not retrying:
        log.warning("stopping sandbox %s %s", handle.id, why)
    try:
        runtime.teardown(handle)
    except Exception as exc:  # any runtime's failure: one line with its cause, never a traceback per sweep
        cause = f"{type(exc).__name__}: {exc}"
        if _reported.get(handle.id) != cause:
            _reported[handle.id] = cause
            log.warning("could not stop sandbox %s: %s", handle.id, cause)
        return False
    return not directory.exists()


def sweep_due(store: JobStore) -> bool:
    """One worker process per host sweeps, at most every SWEEP_EVERY_S."""
    return store.take_lock(keys.orphan_sweep(socket.gethostname()), "1", int(SWEEP_EVERY_S * 1000))


def sweep_orphan_sandboxes(store: JobStore, root: Path | None = None, grace_s: float | None = None) -> int:
    """Stops this node's orphaned sandboxes older than `grace_s` (FARM_ORPHAN_GRACE_S); returns how many."""
    grace_s = get_settings().orphan_grace_s if grace_s is None else grace_s
    now, ours = time.time(), current_farm_id()
    handles, unrecorded = _scan(root or default_root())
    removed = _remove_unrecorded(unrecorded, now - grace_s)
    removed += workspace_fs.sweep_retired(root or default_root(), remove_sandbox_dir, teardown_failure)
    # Another farm's sandbox is unknown to this Redis: stopping it would break that farm's job. An
    # unlabelled one predates farm labels and is taken as this farm's.
    handles = [h for h in handles if h.labels.get(FARM_LABEL, ours) == ours]
    runtime = LocalRuntime(root) if root is not None else get_runtime("local")
    stopped = removed + _stop_ownerless(runtime, handles)
    candidates = [h for h in handles if h.labels.get("job_id") and now - h.created_at > grace_s]
    if not candidates:
        return stopped
    jobs = store.sandbox_claims([h.labels["job_id"] for h in candidates])
    for handle, job in zip(candidates, jobs, strict=True):
        if not is_orphan(handle, job, time.time()):
            continue
        stopped += _stop(runtime, handle, f"(orphaned) of job {handle.labels['job_id']}")
    return stopped
