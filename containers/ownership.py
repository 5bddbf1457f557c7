"""Handing what the host wrote into a workspace to the sandbox's uid, without ever following a link.

The farm (root) copies files into a workspace the sandbox can modify concurrently; a sandbox that swaps a
directory for a symlink must not make root chown a host file. Every step is relative to a directory fd
opened with O_NOFOLLOW beneath the workspace, and every chown is fchownat(..., AT_SYMLINK_NOFOLLOW).
"""

from __future__ import annotations

import os
import stat
from pathlib import PurePosixPath

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


def open_beneath(root: str, relative: str) -> tuple[int, str]:
    """(fd of the parent directory of `relative`, its last component), walking from `root` one
    component at a time without following links. `relative` must not climb out ('..')."""
    parts = [p for p in PurePosixPath(relative).parts if p not in ("", ".", "/")]
    if ".." in parts:
        raise ValueError(f"{relative!r} climbs out of the workspace")
    fd = os.open(root, _DIR_FLAGS)
    try:
        for part in parts[:-1]:
            next_fd = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = next_fd
    except BaseException:
        os.close(fd)
        raise
    return fd, (parts[-1] if parts else ".")


def chown_tree_beneath(root: str, relative: str, uid: int, gid: int) -> None:
    """chown `relative` (beneath `root`) and, if it is a directory, everything under it; links are
    chowned themselves, never followed."""
    parent, name = open_beneath(root, relative)
    try:
        os.chown(name, uid, gid, dir_fd=parent, follow_symlinks=False)
        info = os.stat(name, dir_fd=parent, follow_symlinks=False)
        if not stat.S_ISDIR(info.st_mode):
            return
        top = os.open(name, _DIR_FLAGS, dir_fd=parent)
    finally:
        os.close(parent)
    try:
        _chown_children(top, uid, gid)
    finally:
        os.close(top)


def _chown_children(dir_fd: int, uid: int, gid: int) -> None:
    for entry in os.scandir(dir_fd):
        os.chown(entry.name, uid, gid, dir_fd=dir_fd, follow_symlinks=False)
        if entry.is_dir(follow_symlinks=False):
            try:
                child = os.open(entry.name, _DIR_FLAGS, dir_fd=dir_fd)
            except OSError:  # replaced by a link (or removed) meanwhile: not ours to follow
                continue
            try:
                _chown_children(child, uid, gid)
            finally:
                os.close(child)
