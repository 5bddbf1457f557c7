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
import ctypes
import errno
import fcntl
import functools
import logging
import os
import queue
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

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


_failed: str | None = None
"""Why mounting a workspace filesystem failed in this process, once: later sandboxes do not try again."""


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
    """Gives `workspace` its own ext4 of `cap_mb`; False (nothing changed) where that is unavailable or
    failed (said once; the disk watch's soft cap then holds)."""
    if unavailable() is not None:
        return False
    global _failed
    if _failed is not None:
        return False
    image = sandbox_dir / IMAGE
    try:
        _sparse_copy(_template(cap_mb), image)
        _loop_mount(image, workspace)
    except OSError as exc:
        # e.g. root in a container without loop devices or CAP_SYS_ADMIN: say so once, keep the watch
        image.unlink(missing_ok=True)
        _failed = str(exc)
        log.warning(
            "workspace disk cap: no per-sandbox filesystem (%s); the disk watch's soft cap only from now on",
            exc,
        )
        return False
    with contextlib.suppress(OSError):
        os.rmdir(workspace / "lost+found")
    if uid is not None:
        os.chown(workspace, uid, gid if gid is not None else uid)
    os.chmod(workspace, 0o755)
    return True


_LOOP_CTL_GET_FREE, _LOOP_CONFIGURE, _LOOP_CLR_FD = 0x4C82, 0x4C0A, 0x4C01
_LO_FLAGS_AUTOCLEAR = 4
_MS_NOSUID, _MS_NODEV, _MS_NOATIME = 2, 4, 1024


class _LoopInfo64(ctypes.Structure):
    _fields_ = [
        ("lo_device", ctypes.c_uint64),
        ("lo_inode", ctypes.c_uint64),
        ("lo_rdevice", ctypes.c_uint64),
        ("lo_offset", ctypes.c_uint64),
        ("lo_sizelimit", ctypes.c_uint64),
        ("lo_number", ctypes.c_uint32),
        ("lo_encrypt_type", ctypes.c_uint32),
        ("lo_encrypt_key_size", ctypes.c_uint32),
        ("lo_flags", ctypes.c_uint32),
        ("lo_file_name", ctypes.c_uint8 * 64),
        ("lo_crypt_name", ctypes.c_uint8 * 64),
        ("lo_encrypt_key", ctypes.c_uint8 * 32),
        ("lo_init", ctypes.c_uint64 * 2),
    ]


class _LoopConfig(ctypes.Structure):
    _fields_ = [
        ("fd", ctypes.c_uint32),
        ("block_size", ctypes.c_uint32),
        ("info", _LoopInfo64),
        ("reserved", ctypes.c_uint64 * 8),
    ]


def _loop_mount(image: Path, workspace: Path) -> None:
    """`mount -o loop,<MOUNT_OPTIONS>` done with the loop ioctls and mount(2) (no process to spawn: ~1 ms
    where the mount command took ~35 ms on a loaded host); the command where LOOP_CONFIGURE is missing
    (kernels before 5.8)."""
    from containers.identity import _load_libc

    libc = _load_libc()
    data = b"discard,noinit_itable"
    flags = _MS_NOSUID | _MS_NODEV | _MS_NOATIME
    image_fd = os.open(image, os.O_RDWR | os.O_CLOEXEC)
    try:
        control = os.open("/dev/loop-control", os.O_RDWR | os.O_CLOEXEC)
        try:
            for _ in range(16):  # another process may configure the free device first
                number = fcntl.ioctl(control, _LOOP_CTL_GET_FREE)
                loop = os.open(f"/dev/loop{number}", os.O_RDWR | os.O_CLOEXEC)
                try:
                    config = _LoopConfig(fd=image_fd)
                    config.info.lo_flags = _LO_FLAGS_AUTOCLEAR
                    try:
                        fcntl.ioctl(loop, _LOOP_CONFIGURE, config)
                    except OSError as exc:
                        if exc.errno == errno.EBUSY:
                            continue
                        if exc.errno in (errno.EINVAL, errno.ENOTTY):
                            _mount_command(image, workspace)
                            return
                        raise
                    if libc.mount(
                        f"/dev/loop{number}".encode(), str(workspace).encode(), b"ext4", flags, data
                    ):
                        failed = ctypes.get_errno()
                        with contextlib.suppress(OSError):
                            fcntl.ioctl(loop, _LOOP_CLR_FD)
                        raise OSError(failed, f"mount: {os.strerror(failed)}")
                    return  # closing the loop fd leaves it to the mount (autoclear on unmount)
                finally:
                    os.close(loop)
            raise OSError(errno.EBUSY, "no free loop device")
        finally:
            os.close(control)
    finally:
        os.close(image_fd)


def _mount_command(image: Path, workspace: Path) -> None:
    done = subprocess.run(
        ["mount", "-t", "ext4", "-o", MOUNT_OPTIONS, str(image), str(workspace)],
        capture_output=True,
        text=True,
        timeout=30,
        env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
    )
    if done.returncode != 0:
        raise OSError(done.stderr.strip()[-300:])


RETIRED = ".retired"
"""Sandbox directories whose workspace filesystem is being unmounted and removed (by this process's
retirer thread, or by the orphan sweep when the process died first: `sweep_retired`)."""
Remover = Callable[[Path], object]
"""Removes a sandbox directory, saying a failure once (containers.local.remove_sandbox_dir)."""
_retired: queue.SimpleQueue[tuple[Path, Remover]] = queue.SimpleQueue()
_retirer_lock = threading.Lock()
_retirer: threading.Thread | None = None


def retire(sandbox_dir: Path, remove: Remover) -> bool:
    """Moves a stopped sandbox's directory aside (a rename: its workspace mount moves with it) and leaves
    the unmount and removal to a background thread; False, doing nothing, when its workspace is not a
    filesystem of its own."""
    global _retirer
    if not os.path.ismount(sandbox_dir / "workspace"):
        return False
    aside = sandbox_dir.parent / RETIRED
    target = aside / sandbox_dir.name
    for attempt in range(3):  # the retirer removes `aside` whenever it empties it
        aside.mkdir(mode=0o700, exist_ok=True)
        try:
            os.rename(sandbox_dir, target)
            break
        except FileNotFoundError:
            if attempt == 2 or not sandbox_dir.exists():
                raise
    with contextlib.suppress(OSError):
        os.utime(target)  # its retirement time, for the sweep (`sweep_retired`)
    _retired.put((target, remove))
    _wake.set()
    with _retirer_lock:
        if _retirer is None:
            _retirer = threading.Thread(target=_retire_forever, name="workspace-retirer", daemon=True)
            _retirer.start()
            atexit.register(drain)
    return True


_working = threading.Lock()
"""Held while retired directories are taken from the queue and removed: `drain` returning means none is
queued or under way."""
_wake = threading.Event()


def _retire_forever() -> None:
    while True:
        _wake.wait()
        _wake.clear()
        drain()


def drain() -> None:
    """Finishes the removals under way and queued, here (at exit too: a process that stops sandboxes and
    exits leaves no mount behind)."""
    with _working:
        while True:
            try:
                directory, remove = _retired.get_nowait()
            except queue.Empty:
                return
            _remove_retired(directory, remove)


def detach(workspace: Path) -> None:
    """Lazily unmounts a workspace filesystem (MNT_DETACH: gone from the tree now, released once nothing
    holds it); nothing where it is not mounted."""
    from containers.identity import _load_libc

    _load_libc().umount2(str(workspace).encode(), 2)


def _remove_retired(directory: Path, remove: Remover) -> None:
    if not directory.exists():
        return
    detach(directory / "workspace")
    remove(directory)  # a failure: said once, recorded in the directory
    with contextlib.suppress(OSError):  # not empty: another is on its way
        directory.parent.rmdir()


def sweep_retired(
    root: Path,
    remove: Remover,
    failure_of: Callable[[Path], dict[str, Any] | None],
    older_than_s: float = 60.0,
    retry_failed_s: float = 3600.0,
) -> int:
    """Removes what a dead process left retired under `root` (and, every `retry_failed_s`, quietly, what
    could not be removed: `failure_of` reads what was recorded); returns how many."""
    removed, now = 0, time.time()
    with contextlib.suppress(FileNotFoundError):
        for directory in (root / RETIRED).iterdir():
            with contextlib.suppress(OSError):
                failure = failure_of(directory)
                if failure is not None and now - float(failure.get("at") or 0) < retry_failed_s:
                    continue
                if now - directory.lstat().st_mtime > older_than_s:
                    _remove_retired(directory, remove)
                    removed += not directory.exists()
    return removed


FULL_SLACK = 1 << 20
"""A workspace filesystem with less than this left is full: its cap was reached."""


def usage(workspace: str) -> tuple[int, bool] | None:
    """(bytes used, full) of a workspace on its own filesystem; None when it is not a mount."""
    if not os.path.ismount(workspace):
        return None
    info = os.statvfs(workspace)
    return (info.f_blocks - info.f_bfree) * info.f_frsize, info.f_bavail * info.f_frsize < FULL_SLACK
