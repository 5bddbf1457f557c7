"""Host files a job may copy into its sandbox: only from where the operator allows, with the sandbox's rights.

A job's text (a dataset row, a trainer's request) names the host path of an `upload` step, and the worker
that copies it runs as root on most clusters. So a path is accepted only when:
- it resolves, every link followed, inside an allowed root: FARM_HOST_FILE_ROOTS, or the project's own task
  data (this package's directory). A link or a `..` that leads out of the roots is refused like any other
  path outside them;
- the sandbox's host user (FARM_SANDBOX_UID/GID when the farm runs as root; else the farm's own user) may
  read it and traverse every directory above it, by the permission bits: a root-only 0600 file under an
  allowed root is refused.
The check runs at submit (a 422 naming the field, nothing queued) and again on the worker, which then reads
the files as that user (`pack_as_sandbox_user`: `tar` run with its uid and gid and no supplementary group),
so the kernel itself refuses what the bits above could not tell (ACLs, a file swapped after the check).

A `swe` job's `repo_path` (bound read-only, not copied) goes through the same roots
(`resolve_inside_roots`) but not the readability rule: see handlers/swe/instance.py.
"""

from __future__ import annotations

import base64
import os
import stat
import subprocess
from pathlib import Path

from containers.identity import HostIdentity, host_identity
from farm.settings import get_settings

PROJECT_DATA = str(Path(__file__).resolve().parent)
"""The project's own task data (problem sets, sample repositories, scripts) ships in the handlers package."""
TAR = "/usr/bin/tar" if os.path.exists("/usr/bin/tar") else "/bin/tar"


class HostPathRefused(ValueError):
    """The path may not be copied into a sandbox; the message says why (never what the file holds)."""


def allowed_roots(configured: str | None = None) -> list[str]:
    roots = get_settings().host_file_roots if configured is None else configured
    found = [os.path.realpath(r) for r in roots.split(":") if r.strip()]
    return [*dict.fromkeys([*found, PROJECT_DATA])]


def resolve_inside_roots(path: str, roots: list[str] | None = None, *, strict: bool = True) -> str:
    """The resolved path of `path` (every link and `..` followed) when it lies inside an allowed root;
    HostPathRefused otherwise. `strict=False` accepts a path that does not exist here (its existing
    part is still resolved), for a check made where the path may not be mounted (the API's host)."""
    if not path.startswith("/") or "\0" in path:
        raise HostPathRefused("the host path must be absolute")
    roots = allowed_roots() if roots is None else roots
    try:
        real = os.path.realpath(path, strict=strict)
    except OSError:
        raise HostPathRefused(f"{path} does not exist on this host (or cannot be resolved)") from None
    if not any(real == root or real.startswith(root.rstrip("/") + "/") for root in roots):
        raise HostPathRefused(
            f"{path} is outside the directories the operator allows host files from "
            f"(FARM_HOST_FILE_ROOTS; links and `..` are resolved first): {':'.join(roots)}"
        )
    return real


def check_host_path(path: str, roots: list[str] | None = None) -> str:
    """The resolved path of `path` when a sandbox may receive a copy of it; HostPathRefused otherwise."""
    real = resolve_inside_roots(path, roots)
    identity = sandbox_identity()
    if identity is not None:
        _check_readable(real, identity)
    elif not os.access(real, os.R_OK | (os.X_OK if os.path.isdir(real) else 0)):
        raise HostPathRefused(f"{path} is not readable by the sandbox's user")
    return real


def sandbox_identity() -> HostIdentity | None:
    """Who reads host files for a sandbox: the sandboxes' host user, or None for this process's own."""
    return host_identity()


def _check_readable(real: str, identity: HostIdentity) -> None:
    parents = Path(real).parents
    for directory in reversed(parents):
        if not _permits(os.stat(directory), identity, stat.S_IXUSR):
            raise HostPathRefused(f"{real}: the sandbox's user cannot enter {directory}")
    info = os.stat(real)
    wanted = stat.S_IRUSR | (stat.S_IXUSR if stat.S_ISDIR(info.st_mode) else 0)
    if not _permits(info, identity, wanted):
        raise HostPathRefused(f"{real} is not readable by the sandbox's user (uid {identity.uid})")


def _permits(info: os.stat_result, identity: HostIdentity, owner_bits: int) -> bool:
    """POSIX permission bits as the kernel applies them to `identity` (owner, else group, else others)."""
    if info.st_uid == identity.uid:
        bits = owner_bits
    elif info.st_gid == identity.gid:
        bits = owner_bits >> 3
    else:
        bits = owner_bits >> 6
    return info.st_mode & bits == bits


def pack_as_sandbox_user(path: str, timeout_s: float = 300.0) -> str:
    """`path` (checked) as the execution server's `put` takes it (containers/server/files.py: a base64 tar
    whose single top-level entry is the path's base name), read by the sandbox's user. Links are carried
    as links, never followed; anything the user cannot read fails the copy with tar's own message."""
    real = check_host_path(path)
    identity = sandbox_identity()
    parent, name = os.path.split(real.rstrip("/")) if real != "/" else ("/", ".")
    command = [TAR, "--create", "--file=-", "--no-wildcards", f"--directory={parent or '/'}", "--", name]
    result = subprocess.run(
        command,
        capture_output=True,
        timeout=timeout_s,
        env={"PATH": "/usr/bin:/bin", "LC_ALL": "C"},
        user=identity.uid if identity else None,
        group=identity.gid if identity else None,
        extra_groups=[] if identity else None,
        check=False,
    )
    if result.returncode != 0:
        message = result.stderr.decode(errors="replace").strip().splitlines()
        raise HostPathRefused(f"reading {path} as the sandbox's user failed: {' / '.join(message[-3:])}")
    return base64.b64encode(result.stdout).decode()
