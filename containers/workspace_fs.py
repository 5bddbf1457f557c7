"""The workspace's own filesystem: as root, each local sandbox's workspace is an ext4 filesystem of
exactly its disk cap (FARM_SANDBOX_DISK_MB or limits.disk_mb), in a sparse image file in the sandbox's
directory, loop-mounted on the workspace. A write past the cap fails in the kernel at that moment (ENOSPC,
`fallocate` included), and the host's disk holds at most the cap for it, whatever the watch's timing.

Cheap at start: the filesystem is made once per cap size and process (mkfs.ext4 without a journal, inode
tables left to the kernel's uninit flags: ~300 KB of metadata for 20 GiB), and each sandbox gets a sparse
copy of it (only the written extents) and a loop mount (`mount -o loop`, autoclear: the loop device goes
with the last unmount). Deleting files inside gives the space back to the host (`discard` punches holes).

Unprivileged, or where loop devices or mkfs.ext4 are missing, nothing is mounted: the disk watch's soft cap
(containers/disk_watch.py) and RLIMIT_FSIZE per file are what holds; the worker says so at start."""

from __future__ import annotations

import atexit
import contextlib
import functools
import logging
import os
import shutil
import subprocess
import tempfile
import threading
from pathlib import Path

log = logging.getLogger(__name__)

IMAGE = "workspace.img"
MOUNT_OPTIONS = "loop,nosuid,nodev,noatime,discard,noinit_itable"
MKFS_OPTIONS = [
    "-q",
    "-F",
    "-O",
    "^has_journal,^resize_inode",
    "-E",
    "lazy_itable_init=1,nodiscard",
    "-m",
    "0",
]
"""No journal (a sandbox that crashes is thrown away whole), no reserved blocks, no growth reserve."""

_templates_lock = threading.Lock()


@functools.cache
def unavailable() -> str | None:
    """Why workspaces cannot get their own filesystem here, or None."""
    if os.geteuid() != 0:
        return "not root (a mount needs CAP_SYS_ADMIN on the host)"
    missing = [
        t for t in ("mkfs.ext4", "mount") if shutil.which(t, path="/usr/sbin:/usr/bin:/sbin:/bin") is None
    ]
    if missing:
        return f"{', '.join(missing)} not found (Debian's e2fsprogs, mount)"
    if not os.path.exists("/dev/loop-control"):
        return "no loop devices (/dev/loop-control; modprobe loop)"
    return None


@functools.cache
def _templates_dir() -> Path:
    """This process's directory of empty images (root's only), removed when it exits."""
    made = Path(tempfile.mkdtemp(prefix="farm-fs-templates-"))
    atexit.register(shutil.rmtree, made, True)
    return made


def _template(cap_mb: int) -> Path:
    """A freshly made empty ext4 image of `cap_mb` (made once per size and process: ~20 ms)."""
    directory = _templates_dir()
    path = directory / f"ext4-{cap_mb}m.img"
    if path.exists():
        return path
    with _templates_lock:
        if path.exists():
            return path
        partial = directory / f".{path.name}.{os.getpid()}"
        with open(partial, "wb") as image:
            image.truncate(cap_mb << 20)
        mkfs = shutil.which("mkfs.ext4", path="/usr/sbin:/usr/bin:/sbin:/bin") or "mkfs.ext4"
        done = subprocess.run([mkfs, *MKFS_OPTIONS, str(partial)], capture_output=True, text=True, timeout=60)
        if done.returncode != 0:
            partial.unlink(missing_ok=True)
            raise OSError(f"mkfs.ext4 failed: {done.stderr.strip()[-300:]}")
        os.replace(partial, path)  # whole or not at all
    return path


def _sparse_copy(source: Path, target: Path) -> None:
    """Copies only the written extents of `source` (the rest stays a hole)."""
    with open(source, "rb") as src, open(target, "wb") as dst:
        size = os.fstat(src.fileno()).st_size
        dst.truncate(size)
        offset = 0
        while offset < size:
            try:
                start = os.lseek(src.fileno(), offset, os.SEEK_DATA)
            except OSError:  # ENXIO: no data past offset
                break
            end = os.lseek(src.fileno(), start, os.SEEK_HOLE)
            os.lseek(src.fileno(), start, os.SEEK_SET)
            os.lseek(dst.fileno(), start, os.SEEK_SET)
            left = end - start
            while left > 0:
                copied = os.copy_file_range(src.fileno(), dst.fileno(), left)
                if copied == 0:
                    break
                left -= copied
            offset = end


def mount(sandbox_dir: Path, workspace: Path, cap_mb: int, uid: int | None, gid: int | None) -> bool:
    """Gives `workspace` its own ext4 of `cap_mb`; False (nothing changed) where that is unavailable.
    Raises OSError when it should work and did not."""
    if unavailable() is not None:
        return False
    image = sandbox_dir / IMAGE
    _sparse_copy(_template(cap_mb), image)
    done = subprocess.run(
        ["mount", "-t", "ext4", "-o", MOUNT_OPTIONS, str(image), str(workspace)],
        capture_output=True,
        text=True,
        timeout=30,
        env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
    )
    if done.returncode != 0:
        image.unlink(missing_ok=True)
        raise OSError(f"cannot mount the workspace's filesystem: {done.stderr.strip()[-300:]}")
    with contextlib.suppress(OSError):
        os.rmdir(workspace / "lost+found")
    if uid is not None:
        os.chown(workspace, uid, gid if gid is not None else uid)
    os.chmod(workspace, 0o755)
    return True


FULL_SLACK = 1 << 20
"""A workspace filesystem with less than this left is full: its cap was reached."""


def usage(workspace: str) -> tuple[int, bool] | None:
    """(bytes used, full) of a workspace on its own filesystem; None when it is not a mount."""
    if not os.path.ismount(workspace):
        return None
    info = os.statvfs(workspace)
    return (info.f_blocks - info.f_bfree) * info.f_frsize, info.f_bavail * info.f_frsize < FULL_SLACK
