"""Host-side process helpers: pid identity (a recycled pid is never signalled), kills, pids cgroups."""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path

PIDS_CGROUP_ROOTS = (Path("/sys/fs/cgroup/pids"), Path("/sys/fs/cgroup"))
CGROUP_PARENT = "rollout-farm"


def start_ticks(pid: int) -> int | None:
    """Field 22 of /proc/<pid>/stat (start time since boot, clock ticks); None if the pid is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2 :].split()
    if fields[0] == "Z":
        return None
    return int(fields[19])


def is_same_process(pid: int | None, ticks: int | None) -> bool:
    return pid is not None and ticks is not None and start_ticks(pid) == ticks


def kill_verified(pid: int | None, ticks: int | None, group: bool = False) -> bool:
    """SIGKILL `pid` (or its process group) only if it is still the process recorded at start."""
    if not is_same_process(pid, ticks):
        return False
    assert pid is not None
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if group:
            os.killpg(pid, signal.SIGKILL)
        else:
            os.kill(pid, signal.SIGKILL)
        return True
    return False


def wait_gone(pid: int | None, ticks: int | None, timeout: float) -> bool:
    deadline = time.monotonic() + timeout
    delay = 0.0005
    while is_same_process(pid, ticks):
        if time.monotonic() >= deadline:
            return False
        time.sleep(delay)
        delay = min(delay * 2, 0.02)
    return True


def pids_cgroup_root() -> Path | None:
    """A writable pids-controller hierarchy (cgroup v1 `pids`, or v2 with pids enabled), else None."""
    for root in PIDS_CGROUP_ROOTS:
        v1 = root.name == "pids"
        enabled = (root / "cgroup.subtree_control").exists() and "pids" in _read(root / "cgroup.controllers")
        if (v1 and root.is_dir()) or (not v1 and enabled):
            parent = root / CGROUP_PARENT
            try:
                parent.mkdir(exist_ok=True)
                if not v1:
                    (parent / "cgroup.subtree_control").write_text("+pids")
            except OSError:
                continue
            if os.access(parent, os.W_OK):
                return parent
    return None


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""


def remove_cgroup(group: str | Path | None, timeout: float = 2.0) -> None:
    """Kill whatever is left in the cgroup and remove it."""
    if group is None:
        return
    path = Path(group)
    deadline = time.monotonic() + timeout
    while path.exists():
        for pid in _read(path / "cgroup.procs").split():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(pid), signal.SIGKILL)
        try:
            path.rmdir()
            return
        except OSError:
            if time.monotonic() >= deadline:
                return
            time.sleep(0.002)
