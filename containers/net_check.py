"""Whether this process can give its sandboxes a network, checked once and said in one line.

A networked local sandbox needs pasta (Debian `passt`), a tun device pasta can open as the sandbox's user,
user namespaces (pasta joins the sandbox's), and nft with nsenter for the egress filter. Run as root, the
farm hands pasta a private copy of the tun device owned by the sandbox's uid (containers/netns.py), so a
host whose /dev/net/tun is 0600 still works; unprivileged, the device must be openable by this user. A
missing piece refuses the capability: `network_unavailable()` is the line naming the cause and the fix,
which the worker logs at start and a job asking for a network fails with at once."""

from __future__ import annotations

import functools
import os
import shutil
import stat

from containers.identity import HostIdentity

TUN_DEVICE = "/dev/net/tun"
TUN_MAJOR, TUN_MINOR = 10, 200


def tun_opens_for(identity: HostIdentity | None, device: str = TUN_DEVICE) -> bool:
    """Whether `identity` (None: this process) passes the device's permission bits for read and write."""
    if identity is None:
        return os.access(device, os.R_OK | os.W_OK)
    try:
        info = os.stat(device)
    except OSError:
        return False
    if info.st_uid == identity.uid:
        bits = info.st_mode >> 6
    elif info.st_gid == identity.gid:
        bits = info.st_mode >> 3
    else:
        bits = info.st_mode
    return bits & 0o6 == 0o6


def tun_present(device: str = TUN_DEVICE) -> bool:
    try:
        info = os.stat(device)
    except OSError:
        return False
    return stat.S_ISCHR(info.st_mode) and (os.major(info.st_rdev), os.minor(info.st_rdev)) == (
        TUN_MAJOR,
        TUN_MINOR,
    )


def user_namespaces_enabled() -> bool:
    """The kernel lets this host's users make user namespaces (pasta and bwrap both need one)."""
    for path, minimum in (
        ("/proc/sys/user/max_user_namespaces", 1),
        ("/proc/sys/kernel/unprivileged_userns_clone", 1),
    ):
        try:
            with open(path) as handle:
                if int(handle.read().strip()) < minimum:
                    return False
        except (OSError, ValueError):
            continue
    return True


def network_problem(identity: HostIdentity | None, device: str = TUN_DEVICE) -> str | None:
    """The reason network sandboxes cannot work here, with its fix; None when they can."""
    if shutil.which("pasta") is None:
        return "network sandboxes unavailable: pasta not found; fix: apt-get install passt"
    if not tun_present(device):
        return f"network sandboxes unavailable: no tun device at {device}; fix: modprobe tun"
    if not user_namespaces_enabled():
        return (
            "network sandboxes unavailable: user namespaces are disabled; fix: sysctl "
            "user.max_user_namespaces=15000 (and kernel.unprivileged_userns_clone=1 where it exists)"
        )
    if os.geteuid() != 0 and not tun_opens_for(None, device):
        mode = oct(os.stat(device).st_mode & 0o777)
        return (
            f"network sandboxes unavailable: {device} (mode {mode[2:]}) cannot be opened by uid "
            f"{os.getuid()}, which runs pasta; fix: chmod 0666 {device} (the kernel's default mode), "
            "or run the farm as root"
        )
    if shutil.which("nft") is None or shutil.which("nsenter") is None:
        return (
            "network sandboxes unavailable: nft or nsenter not found, so their egress cannot be filtered; "
            "fix: install Debian's nftables and util-linux"
        )
    return None


@functools.cache
def network_unavailable() -> str | None:
    """`network_problem` for this process and its sandbox identity, checked once."""
    from containers.identity import host_identity

    return network_problem(host_identity())
