"""Host-side file operations on a sandbox-writable tree that never follow a link out of it.

The sandbox can plant symlinks (to files or directories) anywhere in its workspace between two host
operations, so every path is walked one component at a time with `dir_fd` + O_NOFOLLOW: a link in the
middle of a path, or as the final name, is refused (or, when copying a tree out, copied as a link).
"""

from __future__ import annotations

import errno
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path, PurePosixPath

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_CHUNK = 1 << 20


class UnsafePathError(OSError):
    """A path escapes its root: `..`, an absolute part, a symlink, or a non-regular file."""


def _parts(relative: str | PurePosixPath) -> list[str]:
    parts = [p for p in PurePosixPath(relative).parts if p not in ("", ".")]
    if any(p == ".." or p.startswith("/") for p in parts):
        raise UnsafePathError(errno.EPERM, f"path leaves its root: {relative}")
    return parts


def _open_dir(name: str, dir_fd: int | None, create: bool) -> int:
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        if not create:
            raise
        os.mkdir(name, 0o755, dir_fd=dir_fd)
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise UnsafePathError(exc.errno, f"not a real directory: {name}") from exc
        raise


@contextmanager
def open_dir_beneath(root: Path, parts: list[str], create: bool = False) -> Iterator[int]:
    """A descriptor of root/parts..., each component a real directory (created when `create`)."""
    fd = os.open(root, _DIR_FLAGS)
    try:
        for part in parts:
            child = _open_dir(part, fd, create)
            os.close(fd)
            fd = child
        yield fd
    finally:
        os.close(fd)


def _copy_fd(source: int, target: int) -> None:
    while chunk := os.read(source, _CHUNK):
        view = memoryview(chunk)
        while view:
            view = view[os.write(target, view) :]


def _open_regular(name: str, dir_fd: int) -> int:
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise UnsafePathError(exc.errno, f"refusing to follow a symlink: {name}") from exc
        raise
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise UnsafePathError(errno.EINVAL, f"not a regular file: {name}")
    return fd


def _write_into(source: int, dir_fd: int, name: str) -> None:
    """Replace `name` in dir_fd with the content of `source`; a planted link is replaced, not followed."""
    with suppress(FileNotFoundError):
        if stat.S_ISLNK(os.lstat(name, dir_fd=dir_fd).st_mode):
            os.unlink(name, dir_fd=dir_fd)
    flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
    target = os.open(name, flags, stat.S_IMODE(os.fstat(source).st_mode), dir_fd=dir_fd)
    try:
        _copy_fd(source, target)
    finally:
        os.close(target)


def upload_beneath(local: Path, root: Path, relative: str | PurePosixPath) -> None:
    """Copy a host file or directory to root/relative (replacing a file, merging a directory).

    `local` itself is trusted; what lies inside a local directory may be sandbox-written (the evaluator
    copies one sandbox's workspace into another), so it is walked by descriptor too: links are copied as
    links and never followed.
    """
    parts = _parts(relative)
    if local.is_dir():
        source = os.open(local, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            with open_dir_beneath(root, parts, create=True) as fd:
                _upload_tree(source, fd)
        finally:
            os.close(source)
        return
    if not parts:
        raise UnsafePathError(errno.EISDIR, "cannot replace the root with a file")
    with open_dir_beneath(root, parts[:-1], create=True) as fd, open(local, "rb") as source:
        _write_into(source.fileno(), fd, parts[-1])


def _upload_tree(source_fd: int, dir_fd: int) -> None:
    for entry in os.scandir(source_fd):
        mode = os.lstat(entry.name, dir_fd=source_fd).st_mode
        if stat.S_ISLNK(mode):
            with suppress(FileNotFoundError):
                os.unlink(entry.name, dir_fd=dir_fd)
            os.symlink(os.readlink(entry.name, dir_fd=source_fd), entry.name, dir_fd=dir_fd)
        elif stat.S_ISDIR(mode):
            source = _open_dir(entry.name, source_fd, create=False)
            try:
                child = _open_dir(entry.name, dir_fd, create=True)
                try:
                    _upload_tree(source, child)
                finally:
                    os.close(child)
            finally:
                os.close(source)
        elif stat.S_ISREG(mode):
            source = _open_regular(entry.name, source_fd)
            try:
                _write_into(source, dir_fd, entry.name)
            finally:
                os.close(source)


def download_beneath(root: Path, relative: str | PurePosixPath, local: Path) -> None:
    """Copy root/relative (a file, or a directory whose inner links are copied as links) to `local`."""
    parts = _parts(relative)
    with open_dir_beneath(root, parts[:-1] if parts else []) as parent:
        if parts:
            mode = os.lstat(parts[-1], dir_fd=parent).st_mode
            if stat.S_ISLNK(mode):
                raise UnsafePathError(errno.ELOOP, f"refusing to follow a symlink: {relative}")
            if not stat.S_ISDIR(mode):
                source = _open_regular(parts[-1], parent)
                try:
                    local.parent.mkdir(parents=True, exist_ok=True)
                    with open(local, "wb") as target:
                        _copy_fd(source, target.fileno())
                finally:
                    os.close(source)
                return
            fd = _open_dir(parts[-1], parent, create=False)
        else:
            fd = os.dup(parent)
        try:
            _download_tree(fd, local)
        finally:
            os.close(fd)


def _download_tree(dir_fd: int, local: Path) -> None:
    local.mkdir(parents=True, exist_ok=True)
    for entry in os.scandir(dir_fd):
        target = local / entry.name
        mode = os.lstat(entry.name, dir_fd=dir_fd).st_mode
        if stat.S_ISLNK(mode):
            if target.is_symlink() or target.exists():
                target.unlink()
            target.symlink_to(os.readlink(entry.name, dir_fd=dir_fd))
        elif stat.S_ISDIR(mode):
            child = _open_dir(entry.name, dir_fd, create=False)
            try:
                _download_tree(child, target)
            finally:
                os.close(child)
        elif stat.S_ISREG(mode):
            source = _open_regular(entry.name, dir_fd)
            try:
                with open(target, "wb") as out:
                    _copy_fd(source, out.fileno())
            finally:
                os.close(source)
