"""Limits the host enforces on a local sandbox from outside: cgroups (pids, memory including tmpfs pages,
cpu) when this process is root and the hierarchy is writable, and the size of the sandbox's /tmp.

cgroup v1 (one hierarchy per controller) and v2 (one unified hierarchy) are both handled. In v1 a memory
or cpu group is nested under this process's own group, so a limit on the farm still covers its sandboxes.
Where no cgroup can be made, the rlimits set inside by the execution server are all that holds; that is
logged once per process.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
from pathlib import Path

from containers import procs
from containers.spec import ResourceLimits

log = logging.getLogger(__name__)

CGROUP_ROOT = Path("/sys/fs/cgroup")
MB = 1024 * 1024
CPU_PERIOD_US = 100_000


def tmp_size_bytes(limits: ResourceLimits) -> int | None:
    return limits.tmp_mb * MB if limits.tmp_mb else None


def _own_path(controller: str) -> str:
    """This process's group in the v1 hierarchy of `controller` ("/" when unknown)."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            _, names, path = line.split(":", 2)
            if controller in names.split(","):
                return path
    return "/"


def _v2_root() -> Path | None:
    for root in (CGROUP_ROOT, CGROUP_ROOT / "unified"):
        if (root / "cgroup.controllers").exists():
            return root
    return None


@functools.cache
def _parent(controller: str) -> Path | None:
    """A writable parent group for sandboxes' `controller` groups, made once per process; None if none."""
    v1 = CGROUP_ROOT / controller
    if (v1 / "cgroup.procs").exists() and not (v1 / "cgroup.controllers").exists():
        parent = v1 / _own_path(controller).lstrip("/") / procs.CGROUP_PARENT
        with contextlib.suppress(OSError):
            parent.mkdir(exist_ok=True)
            if os.access(parent, os.W_OK):
                return parent
        return None
    root = _v2_root()
    if root is None or controller not in procs._read(root / "cgroup.controllers").split():
        return None
    parent = root / procs.CGROUP_PARENT
    try:
        parent.mkdir(exist_ok=True)
        (parent / "cgroup.subtree_control").write_text(f"+{controller}")
    except OSError:
        return None
    return parent


def _settings(controller: str, limits: ResourceLimits, v2: bool) -> dict[str, str]:
    if controller == "memory" and limits.memory_mb:
        key = "memory.max" if v2 else "memory.limit_in_bytes"
        return {key: str(limits.memory_mb * MB)}
    if controller == "cpu" and limits.cpus:
        quota = int(limits.cpus * CPU_PERIOD_US)
        if v2:
            return {"cpu.max": f"{quota} {CPU_PERIOD_US}"}
        return {"cpu.cfs_period_us": str(CPU_PERIOD_US), "cpu.cfs_quota_us": str(quota)}
    if controller == "pids" and limits.max_processes:
        return {"pids.max": str(limits.max_processes)}
    return {}


def create_cgroups(name: str, limits: ResourceLimits) -> list[Path]:
    """The groups (one per v1 controller, or one v2 group) holding the sandbox's limits; [] if none."""
    groups: dict[Path, dict[str, str]] = {}
    for controller in ("pids", "memory", "cpu"):
        parent = _parent(controller)
        if parent is None:
            continue
        wanted = _settings(controller, limits, v2=(parent.parent / "cgroup.controllers").exists())
        if wanted:
            groups.setdefault(parent / name, {}).update(wanted)
    made: list[Path] = []
    try:
        for group, values in groups.items():
            group.mkdir()
            made.append(group)
            for key, value in values.items():
                (group / key).write_text(value)
    except OSError as exc:
        log.warning("sandbox cgroup %s not set up (%s); rlimits only", name, exc)
        for group in made:
            procs.remove_cgroup(group)
        return []
    return made


def unmount_workspace(workspace: str) -> None:
    if os.geteuid() != 0 or not os.path.ismount(workspace):
        return
    from containers.identity import _load_libc

    _load_libc().umount2(workspace.encode(), 2)  # MNT_DETACH: busy or not, it is gone from the tree


@functools.cache
def log_fallbacks_once() -> None:
    """Says at start-up which host-enforced limits this process cannot apply."""
    if os.geteuid() != 0:
        log.warning(
            "not root: sandboxes get no cgroups (memory, pids, cpu), no workspace filesystem (the disk cap "
            "is the disk watch's, soft: checked every few seconds) and share this user's per-uid kernel "
            "counters (inotify, processes, message queues); rlimits only (RLIMIT_AS, RLIMIT_NPROC, "
            "RLIMIT_CPU, RLIMIT_FSIZE per file); /tmp is size-capped"
        )
        return
    missing = [c for c in ("pids", "memory", "cpu") if _parent(c) is None]
    if missing:
        log.warning("cgroup controllers not writable: %s; those limits fall back to rlimits", missing)
    from containers import workspace_fs

    if (why := workspace_fs.unavailable()) is not None:
        log.warning(
            "workspace disk cap: no per-sandbox filesystem (%s); the disk watch's soft cap only "
            "(FARM_SANDBOX_DISK_MB, checked every few seconds) and RLIMIT_FSIZE per file",
            why,
        )
