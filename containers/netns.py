"""Userspace networking for a networked local sandbox: pasta (Debian `passt`) attached to the sandbox's
own network namespace. The sandbox gets egress through pasta's sockets on the host, as an ordinary
unprivileged process would, but not the host's loopback: no port is forwarded either way and the gateway
address is not mapped to the host (`--no-map-gw`), so the farm's Redis and API on 127.0.0.1 and every
other sandbox are unreachable. `host_ports` are the exceptions a spec grants: the same port on the
sandbox's loopback reaches that port on the host's loopback (the model gateway of a harness)."""

from __future__ import annotations

import fcntl
import os
import shutil
import stat
import subprocess
import tempfile
from collections.abc import Callable
from pathlib import Path

from containers.errors import SandboxStartError
from containers.identity import (
    _CLONE_NEWNS,
    _MS_BIND,
    _MS_NOSUID,
    _MS_PRIVATE,
    _MS_REC,
    HostIdentity,
    _check,
    _load_libc,
    detach_beneath,
    stage_dir,
)
from containers.net_check import TUN_DEVICE, TUN_MAJOR, TUN_MINOR, tun_opens_for


def find_pasta() -> str | None:
    return shutil.which("pasta")


NS_GET_USERNS = 0xB701
"""ioctl on a namespace fd: an fd of the user namespace owning it."""


def pasta_argv(
    pasta: str,
    pid: int,
    pid_file: str,
    host_ports: list[int],
    netns_fd: int | None = None,
    userns_fd: int | None = None,
) -> list[str]:
    """Started by root, pasta runs as the sandbox's host uid (never root: with `--runas 0` it kept uid 0
    and CAP_SYS_ADMIN for its whole life) and joins the sandbox's network namespace through the user
    namespace that owns it, which that uid created (bwrap nests the sandbox's own user namespace below
    it, so "the namespaces of pid" would lack the rights). Unprivileged, it joins the user and network
    namespaces of `pid` (the sandbox then has no nested user namespace: see local.py). Either way it
    holds no capability on the host and confines itself (seccomp, its own namespaces)."""
    argv = [pasta, "--config-net", "--quiet", "--no-map-gw", "-t", "none", "-u", "none", "-U", "none"]
    argv += ["-T", ",".join(str(p) for p in host_ports) if host_ports else "none", "--pid", pid_file]
    if netns_fd is not None and userns_fd is not None:
        joins = ["--userns", f"/proc/self/fd/{userns_fd}", "--netns", f"/proc/self/fd/{netns_fd}"]
        return [*argv, *joins]
    return [*argv, str(pid)]


def _drop_to(
    uid: int, gid: int, private_tun: bool = False, detach_root: str | None = None
) -> Callable[[], None]:
    """Run in the forked pasta before exec: with `private_tun`, first give it, in a mount namespace of its
    own, a tun device node owned by `uid` over /dev/net/tun (the host's may be 0600, root's only: pasta
    opens it by that path once it has joined the sandbox's network namespace); then drop to `uid` for good.
    The copy is the same kernel device (10, 200) on a tmpfs only pasta's mount namespace holds: it grants
    this one process nothing a 0666 device would not grant every user, and the host's node is untouched."""
    libc = _load_libc() if private_tun else None
    where = stage_dir().encode() if private_tun else b""

    def preexec() -> None:
        if libc is not None:
            _check(libc.unshare(_CLONE_NEWNS), "unshare(CLONE_NEWNS)")
            _check(libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None), "make / private")
            if detach_root is not None:
                detach_beneath(libc, detach_root)
            _check(libc.mount(b"tmpfs", where, b"tmpfs", _MS_NOSUID, b"mode=0755,size=16k"), "tmpfs")
            node = where + b"/tun"
            os.mknod(node, 0o600 | stat.S_IFCHR, os.makedev(TUN_MAJOR, TUN_MINOR))
            os.chown(node, uid, gid)
            _check(libc.mount(node, TUN_DEVICE.encode(), None, _MS_BIND, None), "bind the tun device")
        os.setgroups([])
        os.setresgid(gid, gid, gid)
        os.setresuid(uid, uid, uid)

    return preexec


def attach_pasta(
    pasta: str, pid: int, pid_file: Path, host_ports: list[int], runas: tuple[int, int] | None = None
) -> int:
    """Connects the network namespace of `pid`; returns pasta's pid. pasta daemonises once the interface is
    configured. Started by root, `runas` is the sandbox's host uid and gid (the owner of its user
    namespace): pasta is started as that user."""
    fds: list[int] = []
    private: str | None = None
    try:
        if os.geteuid() == 0 and runas is not None:
            # Opened here, with root's rights: the sandbox's processes are not dumpable.
            netns_fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY)
            fds.append(netns_fd)
            userns_fd = fcntl.ioctl(netns_fd, NS_GET_USERNS)
            fds.append(userns_fd)
            # pasta writes its pid file as that user: into a directory of its own, beside the root-only
            # sandbox directory's files
            private = tempfile.mkdtemp(prefix="pasta-")
            os.chown(private, *runas)
            target = os.path.join(private, "pid")
            argv = pasta_argv(pasta, pid, target, host_ports, netns_fd, userns_fd)
            private_tun = not tun_opens_for(HostIdentity(*runas))
            preexec = _drop_to(*runas, private_tun=private_tun, detach_root=str(pid_file.parent.parent))
        else:
            argv, preexec = pasta_argv(pasta, pid, str(pid_file), host_ports), None
        done = subprocess.run(
            argv,
            env={"PATH": "/usr/bin:/bin"},
            capture_output=True,
            timeout=10,
            pass_fds=tuple(fds),
            preexec_fn=preexec,
            cwd="/",
        )
        for fd in fds:
            os.close(fd)
        fds.clear()
        if done.returncode != 0:
            stderr = done.stderr.decode(errors="replace")
            raise SandboxStartError(f"pasta failed ({done.returncode}): {stderr}")
        try:
            if private is not None:
                text = Path(private, "pid").read_text()
                pid_file.write_text(text)
            else:
                text = pid_file.read_text()
            return int(text.strip())
        except (OSError, ValueError):
            raise SandboxStartError("pasta wrote no pid file") from None
    finally:
        for fd in fds:
            os.close(fd)
        if private is not None:
            shutil.rmtree(private, ignore_errors=True)
