"""Userspace networking for a networked local sandbox: pasta (Debian `passt`) attached to the sandbox's
own network namespace. The sandbox gets egress through pasta's sockets on the host, as an ordinary
unprivileged process would, but not the host's loopback: no port is forwarded either way and the gateway
address is not mapped to the host (`--no-map-gw`), so the farm's Redis and API on 127.0.0.1 and every
other sandbox are unreachable. `host_ports` are the exceptions a spec grants: the same port on the
sandbox's loopback reaches that port on the host's loopback (the model gateway of a harness)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from containers.errors import SandboxStartError


def find_pasta() -> str | None:
    return shutil.which("pasta")


def pasta_argv(
    pasta: str, pid: int, pid_file: str, host_ports: list[int], netns_fd: int | None = None
) -> list[str]:
    """As root, pasta joins the namespace directly: bwrap nests the sandbox's user namespace below the one
    owning its network namespace, so joining "the namespaces of pid" would lack the rights. pasta then
    drops every capability and confines itself (seccomp, its own namespaces) before handling traffic.
    Unprivileged, it joins the user and network namespaces of `pid` (the sandbox then has no nested user
    namespace: see local.py)."""
    argv = [pasta, "--config-net", "--quiet", "--no-map-gw", "-t", "none", "-u", "none", "-U", "none"]
    argv += ["-T", ",".join(str(p) for p in host_ports) if host_ports else "none", "--pid", pid_file]
    if netns_fd is not None:
        return [*argv, "--runas", "0", "--netns", f"/proc/self/fd/{netns_fd}", "--netns-only"]
    return [*argv, str(pid)]


def attach_pasta(pasta: str, pid: int, pid_file: Path, host_ports: list[int]) -> int:
    """Connects the network namespace of `pid`; returns pasta's pid. pasta daemonises once the interface is
    configured; started as root it drops to `nobody` itself, with a seccomp filter."""
    # Opened here, with this process's rights: the sandbox's processes are not dumpable, and pasta has
    # dropped its capabilities by the time it opens the path.
    netns_fd = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY) if os.geteuid() == 0 else None
    try:
        argv = pasta_argv(pasta, pid, str(pid_file), host_ports, netns_fd)
        done = subprocess.run(
            argv,
            env={"PATH": "/usr/bin:/bin"},
            capture_output=True,
            timeout=10,
            pass_fds=(netns_fd,) if netns_fd is not None else (),
        )
    finally:
        if netns_fd is not None:
            os.close(netns_fd)
    if done.returncode != 0:
        raise SandboxStartError(f"pasta failed ({done.returncode}): {done.stderr.decode(errors='replace')}")
    try:
        return int(pid_file.read_text().strip())
    except (OSError, ValueError):
        raise SandboxStartError("pasta wrote no pid file") from None
