"""containers/freeze.py: a workspace read as data (issue 34 item 3), on hostile trees built here on the
host: links stay links, fifos never block, depth, size and entries are bounded, nothing recurses."""

from __future__ import annotations

import contextlib
import inspect
import io
import os
import subprocess
import sys
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from containers.freeze import Refused, fingerprint, freeze, scan_named, thaw


@pytest.fixture(autouse=True)
def removed_by_rm(tmp_path: Path) -> Iterator[None]:
    """Deep trees make pytest's own (recursive) cleanup of tmp_path fail."""
    yield
    subprocess.run(["rm", "-rf", "--", str(tmp_path)], check=False)


def deep(root: Path, levels: int) -> Path:
    """A chain of `levels` nested directories under `root` (without os.makedirs, itself recursive)."""
    fd = os.open(root, os.O_RDONLY)
    try:
        for _ in range(levels):
            os.mkdir("d", dir_fd=fd)
            child = os.open("d", os.O_RDONLY, dir_fd=fd)
            os.close(fd)
            fd = child
    finally:
        os.close(fd)
    return root


@contextlib.contextmanager
def recursion_limit(frames_above_here: int) -> Iterator[None]:
    """A recursion limit this many frames above the caller: a tree deeper than that proves a walk does
    not recurse, without building (and removing) a tree deeper than Python's default limit."""
    saved = sys.getrecursionlimit()
    depth = len(inspect.stack(0))
    sys.setrecursionlimit(depth + frames_above_here)
    try:
        yield
    finally:
        sys.setrecursionlimit(saved)


def members(data: bytes) -> dict[str, tarfile.TarInfo]:
    with tarfile.open(fileobj=io.BytesIO(data)) as archive:
        return {m.name: m for m in archive.getmembers()}


def test_links_stay_links_and_special_files_stay_out(tmp_path: Path) -> None:
    (tmp_path / "calc.py").write_text("x = 1\n")
    (tmp_path / "test_hidden.py").symlink_to("/dev/null")
    (tmp_path / "escape").symlink_to("/etc")
    os.mkfifo(tmp_path / "fifo")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "data").write_bytes(b"\0" * 10)
    data, skipped = freeze(str(tmp_path))
    found = members(data)
    assert found["test_hidden.py"].issym() and found["test_hidden.py"].linkname == "/dev/null"
    assert found["escape"].issym() and found["calc.py"].isfile() and found["sub/data"].size == 10
    assert skipped == ["fifo"] and "fifo" not in found


def test_bounds_are_refusals(tmp_path: Path) -> None:
    (tmp_path / "big").write_bytes(b"x" * 2048)
    with pytest.raises(Refused, match="MiB"):
        freeze(str(tmp_path), max_bytes=1024)
    with pytest.raises(Refused, match="entries"):
        freeze(str(tmp_path), max_entries=0)
    deep(tmp_path, 300)
    with recursion_limit(100), pytest.raises(Refused, match="deeper"):
        freeze(str(tmp_path), max_bytes=1 << 20)


def test_an_unreadable_directory_is_a_refusal_not_a_crash(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root reads a mode-000 directory")
    (tmp_path / "locked").mkdir(mode=0)
    with pytest.raises(Refused, match="cannot read"):
        freeze(str(tmp_path))


def test_scan_named_survives_depth_and_marks_it(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text("a")
    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "conftest.py").symlink_to("/etc/passwd")
    deep(tmp_path / "x", 300)
    with recursion_limit(100):
        found = scan_named(str(tmp_path), frozenset({"conftest.py"}), frozenset(), max_depth=2000)
    assert "<depth>" not in found  # walked to the bottom, without recursion
    found = scan_named(str(tmp_path), frozenset({"conftest.py"}), frozenset(), max_depth=256)
    assert found["x/conftest.py"] == "link:/etc/passwd"
    assert found["<depth>"] == "too-deep"
    assert fingerprint(str(tmp_path / "conftest.py")) == found["conftest.py"]


def test_thaw_keeps_inside_links_and_leaves_out_escapes(tmp_path: Path) -> None:
    source, dest = tmp_path / "src", tmp_path / "dest"
    source.mkdir()
    dest.mkdir()
    (source / "a.txt").write_text("a")
    (source / "inside").symlink_to("a.txt")
    (source / "outside").symlink_to("/etc/passwd")
    data, _ = freeze(str(source))
    assert thaw(data, str(dest)) == ["outside"]
    assert os.readlink(dest / "inside") == "a.txt" and not (dest / "outside").exists()
