"""Who a local sandbox runs as on the host, and how its launcher gets there.

When the farm runs as root, bubblewrap is not started as root (uid 0 in the sandbox would be host root for
every file it can see) but as a dedicated unprivileged uid (FARM_SANDBOX_UID, default 65534 `nobody`)
with no supplementary groups. That uid cannot enter root-only directories such as /root, where the
interpreter or the sandboxes root may live, so the launcher first enters a private mount namespace (as
root, in the forked child) and bind-mounts every source bwrap needs onto a tmpfs staging directory the
uid can traverse. bwrap then binds the staged paths to their usual places; the host's mount table is
never changed.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import grp
import logging
import os
import pwd
import stat
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

INNER_UID = 1000
"""The uid (and gid) sandboxed processes see for themselves unless a spec asks for root in the namespace."""
STAGE_CANDIDATES = ("/run/rollout-farm-stage", "/tmp/.rollout-farm-stage")
"""Mount points for the staging tmpfs, under host-root entries that bwrap never binds into a sandbox."""

_CLONE_NEWNS = 0x00020000
_MS_BIND = 4096
_MS_REC = 16384
_MS_PRIVATE = 1 << 18
_MS_NOSUID = 2
_MS_NODEV = 4


@dataclass(frozen=True)
class HostIdentity:
    uid: int
    gid: int


DEFAULT_UID_RANGE = (1879048192, 65536)
"""0x70000000 and the 65,535 uids after it: a range no distribution gives users or subordinate ranges."""
UID_CLAIMS = ("/run/rollout-farm-uids", "/tmp/.rollout-farm-uids")
"""Where the uids of live sandboxes are claimed, one file per uid, for every farm process on the host."""


def uid_range(environ: dict[str, str] | os._Environ[str] = os.environ) -> tuple[int, int] | None:
    """(first uid, how many) sandboxes take their own uid from, or None when FARM_SANDBOX_UID fixes one uid
    for all (the behaviour before: per-uid kernel counters shared). FARM_SANDBOX_UID_RANGE=first:count."""
    if environ.get("FARM_SANDBOX_UID"):
        return None
    raw = environ.get("FARM_SANDBOX_UID_RANGE", "").strip()
    return _checked_range(raw) if raw else DEFAULT_UID_RANGE


SUBORDINATE_TABLES = ("/etc/subuid", "/etc/subgid")


@functools.lru_cache(maxsize=8)
def _checked_range(raw: str) -> tuple[int, int]:
    """FARM_SANDBOX_UID_RANGE parsed, refused (ValueError naming the setting) where a sandbox would share a
    uid with an account of the host or a user's subordinate range (/etc/subuid, /etc/subgid): a sandbox
    running as that uid could read and write that user's files, or its rootless containers'."""
    first_s, _, count_s = raw.partition(":")
    try:
        first, count = int(first_s), int(count_s or 1)
    except ValueError:
        raise ValueError(
            f"FARM_SANDBOX_UID_RANGE={raw!r}: expected FIRST:COUNT, e.g. 1879048192:65536"
        ) from None
    if first <= 0 or count < 1 or first + count > 2**32 - 1:
        raise ValueError(f"FARM_SANDBOX_UID_RANGE={raw!r}: uids must lie in 1..4294967294")
    for owner, start, size in _taken_uids():
        if start < first + count and first < start + size:
            raise ValueError(
                f"FARM_SANDBOX_UID_RANGE={raw!r} overlaps {owner} ({start}..{start + size - 1}): a sandbox "
                "would run as a uid that owns files on this host; choose a range no account or subordinate "
                f"range uses (the default is {DEFAULT_UID_RANGE[0]}:{DEFAULT_UID_RANGE[1]})"
            )
    return first, count


def _taken_uids() -> list[tuple[str, int, int]]:
    """(what, first uid or gid, how many): the host's accounts and groups and its subordinate ranges."""
    taken = [(f"the account {u.pw_name}", u.pw_uid, 1) for u in pwd.getpwall()]
    taken += [(f"the group {g.gr_name}", g.gr_gid, 1) for g in grp.getgrall()]
    for table in SUBORDINATE_TABLES:
        with contextlib.suppress(OSError):
            for line in Path(table).read_text().splitlines():
                name, _, rest = line.strip().partition(":")
                start, _, size = rest.partition(":")
                if start.isdigit() and size.isdigit():
                    taken.append((f"{name}'s range in {table}", int(start), int(size)))
    return taken


def host_identity(environ: dict[str, str] | os._Environ[str] = os.environ) -> HostIdentity | None:
    """The unprivileged uid/gid sandboxes run as, or None when this process is not root (it is then
    unprivileged itself) or FARM_SANDBOX_UID=0 asks to keep root (not recommended). With a uid range (the
    default) this is its first uid, standing for any of them where only permissions matter (each is an
    "other" user with a group of its own): each sandbox gets its own uid from `claim_identity`."""
    if os.geteuid() != 0:
        return None
    fixed = environ.get("FARM_SANDBOX_UID")
    uid = int(fixed) if fixed else (uid_range(environ) or DEFAULT_UID_RANGE)[0]
    if uid == 0:
        return None
    gid = int(environ.get("FARM_SANDBOX_GID", uid)) if fixed else uid
    return HostIdentity(uid, gid)


def _claims_dir() -> str:
    for candidate in UID_CLAIMS:
        with contextlib.suppress(OSError):
            os.makedirs(candidate, mode=0o700, exist_ok=True)
            info = os.lstat(candidate)
            if info.st_uid == 0 and stat.S_ISDIR(info.st_mode) and info.st_mode & 0o077 == 0:
                return candidate
    raise OSError(f"no usable directory for sandbox uid claims among {UID_CLAIMS}")


def _stale(claim: str) -> bool:
    """A claim whose sandbox directory is gone (its process killed before releasing it)."""
    try:
        with open(claim) as handle:
            owner = handle.read()
    except OSError:
        return False
    return bool(owner) and not os.path.lexists(owner)


def claim_identity(
    sandbox_dir: str, environ: dict[str, str] | os._Environ[str] = os.environ
) -> HostIdentity | None:
    """The host identity of a new sandbox: as root with a uid range, the lowest uid no live sandbox on this
    host holds (so per-uid kernel counters, inotify instances and watches, processes, message queues, are
    the sandbox's own); else `host_identity()`. Released by `release_identity` at teardown."""
    identity = host_identity(environ)
    span = uid_range(environ)
    if identity is None or span is None:
        return identity
    directory = _claims_dir()
    first, count = span
    for uid in range(first, first + count):
        claim = f"{directory}/{uid}"
        for _ in range(2):
            try:
                fd = os.open(claim, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            except FileExistsError:
                if _stale(claim):
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(claim)
                    continue
                break
            try:
                os.write(fd, sandbox_dir.encode())
            finally:
                os.close(fd)
            return HostIdentity(uid, uid)
    raise OSError(f"every sandbox uid of {first}..{first + count - 1} is taken (FARM_SANDBOX_UID_RANGE)")


def release_identity(uid: int | None, sandbox_dir: str) -> None:
    """Gives back a uid `claim_identity` gave the sandbox in `sandbox_dir` (nothing for a fixed uid)."""
    if uid is None or os.geteuid() != 0 or uid_range() is None:
        return
    for directory in UID_CLAIMS:
        claim = f"{directory}/{uid}"
        with contextlib.suppress(OSError):
            with open(claim) as handle:
                if handle.read() != sandbox_dir:
                    continue
            os.unlink(claim)


def stage_dir() -> str:
    """An existing root-owned directory, traversable by anyone, to mount the staging tmpfs on."""
    for candidate in STAGE_CANDIDATES:
        try:
            os.makedirs(candidate, mode=0o755, exist_ok=True)
            info = os.lstat(candidate)
        except OSError:
            continue
        if info.st_uid == 0 and not os.path.islink(candidate) and info.st_mode & 0o022 == 0:
            return candidate
    raise OSError(f"no usable staging directory among {STAGE_CANDIDATES}")


@dataclass
class Staging:
    """Sources to bind under the staging tmpfs: `stage(path)` returns the path bwrap should use instead.

    Sources in `idmapped` are bound through an idmapped mount (read-only) on which files of host root
    appear owned by the sandbox's uid: a task's repository in a root-private directory (mode 700) stays
    readable without changing anything on the host."""

    root: str
    sources: list[str] = field(default_factory=list)
    idmapped: set[str] = field(default_factory=set)
    userns_fd: int | None = None

    def stage(self, source: str) -> str:
        if source in self.sources:
            return f"{self.root}/{self.sources.index(source)}"
        self.sources.append(source)
        return f"{self.root}/{len(self.sources) - 1}"


_libc: ctypes.CDLL | None = None
_idmap_userns: dict[int, int] = {}

_SYS_OPEN_TREE, _SYS_MOVE_MOUNT, _SYS_MOUNT_SETATTR = 428, 429, 442  # x86_64 and aarch64 alike
_OPEN_TREE_CLONE, _AT_RECURSIVE, _AT_EMPTY_PATH, _AT_FDCWD = 1, 0x8000, 0x1000, -100
_MOUNT_ATTR_RDONLY, _MOUNT_ATTR_IDMAP, _MOVE_MOUNT_F_EMPTY_PATH = 1, 0x00100000, 4


class _MountAttr(ctypes.Structure):
    _fields_ = [
        ("attr_set", ctypes.c_uint64),
        ("attr_clr", ctypes.c_uint64),
        ("propagation", ctypes.c_uint64),
        ("userns_fd", ctypes.c_uint64),
    ]


def idmap_userns(identity: HostIdentity) -> int | None:
    """An fd of a user namespace mapping 0 to the sandbox's uid/gid (made once per process), the idmap
    of `Staging.idmapped` sources; None where user namespaces cannot be made."""
    if identity.uid in _idmap_userns:
        return _idmap_userns[identity.uid]
    libc = _load_libc()
    ready_r, ready_w = os.pipe()
    done_r, done_w = os.pipe()
    pid = os.fork()
    if pid == 0:  # only async-signal-safe work here: unshare, write, read, _exit
        try:
            ok = libc.unshare(0x10000000) == 0  # CLONE_NEWUSER
            os.write(ready_w, b"1" if ok else b"0")
            os.read(done_r, 1)
        finally:
            os._exit(0)
    os.close(ready_w)
    os.close(done_r)
    fd = None
    try:
        if os.read(ready_r, 1) == b"1":
            with open(f"/proc/{pid}/uid_map", "w") as uid_map:
                uid_map.write(f"0 {identity.uid} 1\n")
            with open(f"/proc/{pid}/setgroups", "w") as setgroups:
                setgroups.write("deny")
            with open(f"/proc/{pid}/gid_map", "w") as gid_map:
                gid_map.write(f"0 {identity.gid} 1\n")
            fd = os.open(f"/proc/{pid}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    except OSError as exc:
        log.warning("no idmapped binds (%s): root-private read-only binds stay unreadable", exc)
    finally:
        os.write(done_w, b"x")
        os.close(done_w)
        os.close(ready_r)
        os.waitpid(pid, 0)
    if fd is not None:
        _idmap_userns[identity.uid] = fd
    return fd


def _load_libc() -> ctypes.CDLL:
    # Loaded in the parent: the forked child must not take the dynamic loader's locks.
    global _libc
    if _libc is None:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.mount.argtypes = [
            ctypes.c_char_p,
            ctypes.c_char_p,
            ctypes.c_char_p,
            ctypes.c_ulong,
            ctypes.c_char_p,
        ]
        libc.unshare.argtypes = [ctypes.c_int]
        libc.umount2.argtypes = [ctypes.c_char_p, ctypes.c_int]
        libc.syscall.restype = ctypes.c_long
        _libc = libc
    return _libc


def _check(result: int, what: str) -> None:
    if result != 0:
        errno = ctypes.get_errno()
        raise OSError(errno, f"{what}: {os.strerror(errno)}")


def detach_beneath(libc: ctypes.CDLL, root: str, keep: str | None = None) -> None:
    """In a private mount namespace just made: lazily unmounts the mounts under `root` (other sandboxes'
    workspace filesystems, copied into it) but `keep`, so that this namespace holds none of them busy
    after their own teardown (their loop device and image would live as long as it does)."""
    prefix = root.rstrip("/") + "/"
    with open("/proc/self/mountinfo", "rb") as table:
        points = [line.split()[4].decode() for line in table]
    for point in reversed(points):
        if point.startswith(prefix) and point != keep:
            libc.umount2(point.encode(), 2)  # MNT_DETACH; a failure leaves it as it was


def launcher_preexec(
    identity: HostIdentity | None,
    staging: Staging | None,
    cgroup_procs: list[str],
    detach: tuple[str, str] | None = None,
) -> Callable[[], None] | None:
    """The function the forked launcher runs before exec: join the sandbox's cgroups, stage the bind
    sources in a private mount namespace (where `detach`, (sandboxes root, own workspace), drops the
    other sandboxes' workspace mounts), then drop to the sandbox's host uid for good."""
    if identity is None and not cgroup_procs:
        return None
    libc = _load_libc() if staging is not None and staging.sources else None

    def preexec() -> None:
        pid = str(os.getpid()).encode()
        for procs_file in cgroup_procs:
            fd = os.open(procs_file, os.O_WRONLY)
            try:
                os.write(fd, pid)
            finally:
                os.close(fd)
        if libc is not None and staging is not None:
            _check(libc.unshare(_CLONE_NEWNS), "unshare(CLONE_NEWNS)")
            _check(libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None), "make / private")
            if detach is not None:
                detach_beneath(libc, *detach)
            root = staging.root.encode()
            _check(
                libc.mount(b"tmpfs", root, b"tmpfs", _MS_NOSUID | _MS_NODEV, b"mode=0755,size=64k"), "tmpfs"
            )
            for index, source in enumerate(staging.sources):
                target = f"{staging.root}/{index}"
                if os.path.isdir(source):
                    os.mkdir(target, 0o755)
                else:
                    os.close(os.open(target, os.O_CREAT | os.O_WRONLY, 0o644))
                if not (
                    source in staging.idmapped and _idmapped_bind(libc, source, target, staging.userns_fd)
                ):
                    _check(
                        libc.mount(source.encode(), target.encode(), None, _MS_BIND | _MS_REC, None), source
                    )
        if identity is not None:
            os.setgroups([])
            os.setresgid(identity.gid, identity.gid, identity.gid)
            os.setresuid(identity.uid, identity.uid, identity.uid)

    return preexec


def _idmapped_bind(libc: ctypes.CDLL, source: str, target: str, userns_fd: int | None) -> bool:
    """Bind `source` on `target` read-only through the idmap of `userns_fd`; False if the kernel or the
    filesystem cannot (the caller then binds it plainly)."""
    if userns_fd is None:
        return False
    fd = libc.syscall(
        _SYS_OPEN_TREE, _AT_FDCWD, source.encode(), _OPEN_TREE_CLONE | os.O_CLOEXEC | _AT_RECURSIVE
    )
    if fd < 0:
        return False
    try:
        attr = _MountAttr(_MOUNT_ATTR_IDMAP | _MOUNT_ATTR_RDONLY, 0, 0, userns_fd)
        flags = _AT_EMPTY_PATH | _AT_RECURSIVE
        if libc.syscall(_SYS_MOUNT_SETATTR, fd, b"", flags, ctypes.byref(attr), ctypes.sizeof(attr)) != 0:
            return False
        moved = libc.syscall(_SYS_MOVE_MOUNT, fd, b"", _AT_FDCWD, target.encode(), _MOVE_MOUNT_F_EMPTY_PATH)
        return bool(moved == 0)
    finally:
        os.close(fd)
