"""The workspace disk cap on by default: a watcher in each process that started or attached a local
sandbox measures its workspace (on the host, without following links) and, past the cap, kills every
process of the sandbox and leaves a marker; the next operation on it raises SandboxLimitExceeded, which a
job ends with (a resource failure, never a result).

The workspace lives on the host's disk, which has no per-directory quota to lean on: an explicit
`limits.disk_mb` as root also mounts a size-capped tmpfs there (RAM-backed, so not the default). The
watch measures every `interval` (at least DEFAULT_INTERVAL_S, and 20x the last measurement's own time,
so a huge tree costs at most ~5% of a core); a write can overshoot the cap by what it writes in between,
each file being capped by RLIMIT_FSIZE besides.

FARM_SANDBOX_DISK_MB sets the default cap (DEFAULT_DISK_MB; 0 turns it off)."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import stat
import threading
import time
from pathlib import Path

from containers import procs, workspace_fs
from containers.errors import SandboxLimitExceeded
from containers.handle import SandboxHandle

log = logging.getLogger(__name__)

DEFAULT_DISK_MB = 20480
"""20 GiB: a large repository with its environment and build outputs."""
DEFAULT_INTERVAL_S = 2.0
MARKER = "limit.json"


def default_cap_mb(environ: dict[str, str] | os._Environ[str] = os.environ) -> int | None:
    raw = environ.get("FARM_SANDBOX_DISK_MB", "").strip()
    if not raw:
        return DEFAULT_DISK_MB
    value = int(raw)
    return value if value > 0 else None


def usage_bytes(root: str) -> int:
    """Bytes allocated under `root` (st_blocks), links not followed, other filesystems included."""
    total = 0
    stack = [root]
    while stack:
        directory = stack.pop()
        with contextlib.suppress(OSError), os.scandir(directory) as entries:
            for entry in entries:
                with contextlib.suppress(OSError):
                    info = entry.stat(follow_symlinks=False)
                    total += info.st_blocks * 512
                    if stat.S_ISDIR(info.st_mode):
                        stack.append(entry.path)
    return total


def exceeded(handle: SandboxHandle) -> dict[str, object] | None:
    """The marker a watcher left when it ended the sandbox, else None."""
    try:
        found: dict[str, object] = json.loads((Path(handle.sandbox_dir) / MARKER).read_text())
    except (OSError, ValueError):
        return None
    return found


def raise_if_exceeded(handle: SandboxHandle, cause: BaseException | None = None) -> None:
    marker = exceeded(handle)
    if marker is not None:
        raise SandboxLimitExceeded(
            f"sandbox {handle.id} was ended: its workspace used {marker.get('used_mb')} MB, reaching its "
            f"{marker.get('cap_mb')} MB disk cap (FARM_SANDBOX_DISK_MB or limits.disk_mb)"
        ) from cause


class DiskWatch:
    """One thread per process watching every sandbox it was handed, until its directory is gone."""

    def __init__(self, interval_s: float = DEFAULT_INTERVAL_S) -> None:
        self.interval_s = interval_s
        self._watched: dict[str, tuple[SandboxHandle, int]] = {}
        self._lock = threading.Lock()
        self._wake = threading.Event()
        self._thread: threading.Thread | None = None

    def watch(self, handle: SandboxHandle, cap_mb: int | None) -> None:
        if not cap_mb:
            return
        with self._lock:
            self._watched[handle.id] = (handle, cap_mb)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="sandbox-disk-watch", daemon=True)
                self._thread.start()
        self._wake.set()

    def check(self, handle: SandboxHandle, cap_mb: int) -> bool:
        """Measures once; ends the sandbox and returns True when it is over its cap (or, on the workspace's
        own filesystem, which stops writes at the cap itself, when that is full)."""
        own = workspace_fs.usage(handle.workspace)
        if own is not None:
            used, full = own
            if not full:
                return False
        else:
            used = usage_bytes(handle.workspace)
            if used <= cap_mb << 20:
                return False
        marker = Path(handle.sandbox_dir) / MARKER
        with contextlib.suppress(OSError):
            marker.write_text(json.dumps({"limit": "disk", "cap_mb": cap_mb, "used_mb": used >> 20}))
        log.warning(
            "sandbox %s: workspace at %d MB, over its %d MB cap: ending it", handle.id, used >> 20, cap_mb
        )
        procs.kill_verified(handle.init_pid, handle.init_start)
        return True

    def _run(self) -> None:
        delay = self.interval_s
        while True:
            self._wake.wait(delay)
            self._wake.clear()
            started = time.monotonic()
            with self._lock:
                watched = list(self._watched.values())
            for handle, cap_mb in watched:
                gone = not os.path.isdir(handle.sandbox_dir) or exceeded(handle) is not None
                if gone or self.check(handle, cap_mb):
                    with self._lock:
                        self._watched.pop(handle.id, None)
            delay = max(self.interval_s, 20 * (time.monotonic() - started))


_watch = DiskWatch()


def watch(handle: SandboxHandle, cap_mb: int | None) -> None:
    _watch.watch(handle, cap_mb)
