"""Removing a sandbox's directory whatever its rollout left there: trees deeper than any recursion (or
than PATH_MAX), directories and files with their permissions removed, links (never followed), fifos,
sockets and devices (never opened).

The walk holds one directory fd at a time and a stack of names, not of paths or frames: it goes down by
`openat(name, O_NOFOLLOW)` and back up by `openat("..")` (the sandbox's processes are dead by then; no one
renames under it). Every directory is first made 0700 by its owner (this process: the farm's user owns
what an unprivileged sandbox wrote; root owns nothing it cannot change), so a rollout's `chmod 000` or
read-only directory stops nothing. Failures do not stop the walk: what can be removed is, and the first
failure is raised at the end as one OSError naming the entry and its cause."""

from __future__ import annotations

import contextlib
import os
import stat

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class RemovalError(OSError):
    """Part of a tree could not be removed; the message names the first entry and its cause."""


def _open_dir(name: str, parent: int | None) -> int:
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=parent)
    except PermissionError:  # mode 000 (or no x above it): give it back to its owner, then open
        os.chmod(name, 0o700, dir_fd=parent)
        return os.open(name, _DIR_FLAGS, dir_fd=parent)


def _clear_files(fd: int, failures: list[str], where: str) -> list[str]:
    """Unlinks every non-directory entry of the directory `fd`; returns its subdirectories' names."""
    with contextlib.suppress(OSError):
        os.fchmod(fd, 0o700)
    subdirs = []
    with os.scandir(fd) as entries:
        listed = list(entries)
    for entry in listed:
        try:
            if stat.S_ISDIR(entry.stat(follow_symlinks=False).st_mode):
                subdirs.append(entry.name)
            else:
                os.unlink(entry.name, dir_fd=fd)
        except FileNotFoundError:
            continue
        except OSError as exc:
            failures.append(f"{where}/{entry.name}: {exc.strerror or exc}")
    return subdirs


def remove_tree(path: str) -> None:
    """Removes `path` (a directory, or whatever else is there) and everything under it. Missing: nothing
    to do. Raises RemovalError naming the first entry that stayed, after removing all it could."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(info.st_mode):
        os.unlink(path)
        return
    failures: list[str] = []
    names: list[str] = []  # the way down from `path` to the directory `fd` is open on
    pending: list[list[str]] = []  # per level, the subdirectories still to remove
    fd = _open_dir(path, None)
    try:
        pending.append(_clear_files(fd, failures, path))
        while pending:
            if pending[-1]:
                name = pending[-1].pop()
                try:
                    child = _open_dir(name, fd)
                except OSError as exc:
                    failures.append(f"{_shown(path, names)}/{name}: {exc.strerror or exc}")
                    continue
                os.close(fd)
                fd = child
                names.append(name)
                pending.append(_clear_files(fd, failures, _shown(path, names)))
                continue
            pending.pop()
            if not names:
                break
            parent = os.open("..", _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = parent
            name = names.pop()
            try:
                os.rmdir(name, dir_fd=fd)
            except OSError as exc:
                failures.append(f"{_shown(path, names)}/{name}: {exc.strerror or exc}")
    finally:
        os.close(fd)
    try:
        os.rmdir(path)
    except OSError as exc:
        if not failures:
            failures.append(f"{path}: {exc.strerror or exc}")
    if failures:
        more = f" (and {len(failures) - 1} more)" if len(failures) > 1 else ""
        raise RemovalError(f"could not remove {failures[0]}{more}")


def _shown(path: str, names: list[str]) -> str:
    """A readable name for an entry deep in the tree (the full one may be longer than PATH_MAX)."""
    if len(names) <= 4:
        return "/".join([path, *names])
    return "/".join([path, names[0], f"...({len(names) - 2} levels)...", names[-1]])
