"""A workspace read as data, inside its sandbox, by the sandbox's own user, once nothing of the rollout runs.

Used by the execution server's evaluation ops (containers/server/evaluation.py), never on the host as root:
- `freeze`: a tar archive of a directory tree, links carried as links (never followed), fifos, sockets and
  devices left out (named in `skipped`), bounded in bytes, entries and depth; what breaks a bound is a
  `Refused` naming it, not a partial copy;
- `scan_named`: a fingerprint (sha256, `link:<target>`, `special:<type>`) of every entry with one of some
  names (conftest.py, ...), for comparing a workspace before and after a rollout.

Both walk with an explicit stack (a tree 10,000 directories deep costs no recursion), open every file with
O_NOFOLLOW|O_NONBLOCK (a fifo never blocks the walk), and look at each entry with lstat only.
"""

from __future__ import annotations

import hashlib
import io
import os
import stat
import tarfile

MAX_FREEZE_BYTES = 64 << 20
MAX_FREEZE_ENTRIES = 100_000
MAX_DEPTH = 256
MAX_HASHED_BYTES = 8 << 20
FREEZE_SKIPPED_DIRS = ("__pycache__", ".pytest_cache")


class Refused(Exception):
    """What the tree holds makes the operation impossible (too large, too deep, unreadable): the rollout's."""


def _children(path: str, rel: str) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(path) as listing:
            return sorted(listing, key=lambda entry: entry.name)
    except OSError as exc:
        raise Refused(f"cannot read the directory {rel or '.'}: {exc.strerror}") from None


def freeze(
    root: str,
    *,
    max_bytes: int = MAX_FREEZE_BYTES,
    max_entries: int = MAX_FREEZE_ENTRIES,
    max_depth: int = MAX_DEPTH,
    skipped_dirs: tuple[str, ...] = FREEZE_SKIPPED_DIRS,
) -> tuple[bytes, list[str]]:
    """(uncompressed tar of `root` with `.` as its top entry, paths left out as special files)."""
    buffer = io.BytesIO()
    skipped: list[str] = []
    total = entries = 0
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as archive:
        try:
            top = os.lstat(root)
        except OSError as exc:
            raise Refused(f"cannot look at the workspace: {exc.strerror}") from None
        if not stat.S_ISDIR(top.st_mode):
            raise Refused("the workspace is no longer a directory")
        archive.addfile(_info(".", top))
        stack: list[tuple[str, int]] = [("", 0)]
        while stack:
            rel, depth = stack.pop()
            for entry in _children(os.path.join(root, rel) if rel else root, rel):
                name = f"{rel}/{entry.name}" if rel else entry.name
                entries += 1
                if entries > max_entries:
                    raise Refused(f"the workspace holds more than {max_entries} entries")
                info = entry.stat(follow_symlinks=False)
                mode = info.st_mode
                if stat.S_ISDIR(mode):
                    if entry.name in skipped_dirs:
                        continue
                    if depth + 1 > max_depth:
                        raise Refused(f"the workspace's tree is deeper than {max_depth} directories")
                    archive.addfile(_info(name, info))
                    stack.append((name, depth + 1))
                elif stat.S_ISLNK(mode):
                    link = _info(name, info)
                    link.type, link.linkname = tarfile.SYMTYPE, os.readlink(entry.path)
                    archive.addfile(link)
                elif stat.S_ISREG(mode):
                    total += info.st_size
                    if total > max_bytes:
                        raise Refused(f"the workspace holds more than {max_bytes >> 20} MiB of files")
                    _add_file(archive, entry.path, name, info)
                else:
                    skipped.append(name)
    return buffer.getvalue(), skipped


def _info(name: str, info: os.stat_result) -> tarfile.TarInfo:
    member = tarfile.TarInfo(name)
    member.mode = info.st_mode & 0o7777 & ~0o6000  # never set-id bits
    member.mtime = int(info.st_mtime)
    if stat.S_ISDIR(info.st_mode):
        member.type = tarfile.DIRTYPE
    return member


def _add_file(archive: tarfile.TarFile, path: str, name: str, info: os.stat_result) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError as exc:
        raise Refused(f"cannot read {name}: {exc.strerror}") from None
    with os.fdopen(fd, "rb") as handle:
        opened = os.fstat(fd)
        if not stat.S_ISREG(opened.st_mode):
            raise Refused(f"{name} changed while it was read")
        member = _info(name, opened)
        member.size = opened.st_size
        archive.addfile(member, handle)


def scan_named(
    root: str, names: frozenset[str], skipped_dirs: frozenset[str], max_depth: int = MAX_DEPTH
) -> dict[str, str]:
    """Relative path → fingerprint of every entry under `root` whose name is in `names`; a tree deeper than
    `max_depth` adds the entry `<depth>` → "too-deep" (compared like any other change)."""
    found: dict[str, str] = {}
    stack: list[tuple[str, int]] = [("", 0)]
    while stack:
        rel, depth = stack.pop()
        try:
            with os.scandir(os.path.join(root, rel) if rel else root) as listing:
                children = list(listing)
        except OSError as exc:
            found[rel or "."] = f"unreadable:{exc.errno}"
            continue
        for entry in children:
            name = f"{rel}/{entry.name}" if rel else entry.name
            if entry.name in names:
                found[name] = fingerprint(entry.path)
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                continue
            if is_dir and entry.name not in skipped_dirs:
                if depth + 1 > max_depth:
                    found["<depth>"] = "too-deep"
                    continue
                stack.append((name, depth + 1))
    return found


def fingerprint(path: str) -> str:
    try:
        info = os.lstat(path)
        if stat.S_ISLNK(info.st_mode):
            return f"link:{os.readlink(path)}"
        if not stat.S_ISREG(info.st_mode):
            return f"special:{stat.S_IFMT(info.st_mode)}"
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as handle:
            return hashlib.sha256(handle.read(MAX_HASHED_BYTES)).hexdigest()
    except OSError as exc:
        return f"unreadable:{exc.errno}"


def thaw(data: bytes, dest: str) -> list[str]:
    """Extract an archive made by `freeze` into the existing directory `dest` (tarfile's `data` filter: no
    absolute names, nothing outside `dest`, links only to inside it, no set-id bits); returns the members
    the filter refused (left out)."""
    refused: list[str] = []
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as archive:
        for member in archive:
            if member.name in (".", ""):
                continue
            try:
                kept = tarfile.data_filter(member, dest)
            except tarfile.FilterError:
                refused.append(member.name)
                continue
            archive.extract(kept, dest, set_attrs=True, filter="fully_trusted")
    return refused


__all__ = ["Refused", "fingerprint", "freeze", "scan_named", "thaw"]
