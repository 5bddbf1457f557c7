"""Unit tests of containers/safe_paths.py: host copies beneath a root never follow links out of it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from containers.safe_paths import UnsafePathError, download_beneath, upload_beneath


@pytest.fixture
def tree(tmp_path: Path) -> tuple[Path, Path]:
    root, outside = tmp_path / "ws", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "secret").write_text("host-secret")
    return root, outside


def test_round_trip_file_and_tree(tree: tuple[Path, Path], tmp_path: Path) -> None:
    root, _ = tree
    src = tmp_path / "src"
    (src / "a" / "b").mkdir(parents=True)
    (src / "a" / "b" / "f.txt").write_text("hello")
    (src / "link").symlink_to("a/b/f.txt")
    upload_beneath(src, root, "deep/dir")
    assert (root / "deep/dir/a/b/f.txt").read_text() == "hello"
    assert os.readlink(root / "deep/dir/link") == "a/b/f.txt"
    download_beneath(root, "deep/dir", tmp_path / "back")
    assert (tmp_path / "back/a/b/f.txt").read_text() == "hello"
    assert (tmp_path / "back/link").is_symlink()
    download_beneath(root, "deep/dir/a/b/f.txt", tmp_path / "one.txt")
    assert (tmp_path / "one.txt").read_text() == "hello"


@pytest.mark.parametrize("relative", ["../x", "a/../../x", "/etc/passwd"])
def test_paths_leaving_the_root_are_refused(tree: tuple[Path, Path], tmp_path: Path, relative: str) -> None:
    root, _ = tree
    with pytest.raises(UnsafePathError):
        download_beneath(root, relative, tmp_path / "got")


def test_final_and_middle_links_are_not_followed(tree: tuple[Path, Path], tmp_path: Path) -> None:
    root, outside = tree
    (root / "f").symlink_to(outside / "secret")
    (root / "d").symlink_to(outside)
    for relative in ("f", "d/secret", "d"):
        with pytest.raises(UnsafePathError):
            download_beneath(root, relative, tmp_path / "got")
    payload = tmp_path / "payload"
    payload.write_text("overwrite")
    with pytest.raises(UnsafePathError):
        upload_beneath(payload, root, "d/new")
    upload_beneath(payload, root, "f")  # replaces the link itself
    assert (outside / "secret").read_text() == "host-secret"
    assert not (root / "f").is_symlink() and (root / "f").read_text() == "overwrite"
    assert not (outside / "new").exists()


def test_sandbox_written_source_tree_links_are_copied_as_links(
    tree: tuple[Path, Path], tmp_path: Path
) -> None:
    """The evaluator uploads one sandbox's workspace into another: a link in it must not pull host files."""
    root, outside = tree
    src = tmp_path / "other-ws"
    src.mkdir()
    (src / "leak").symlink_to(outside / "secret")
    (src / "leakdir").symlink_to(outside)
    upload_beneath(src, root, "")
    assert (root / "leak").is_symlink() and (root / "leakdir").is_symlink()


def test_fifo_is_refused(tree: tuple[Path, Path], tmp_path: Path) -> None:
    root, _ = tree
    os.mkfifo(root / "pipe")
    with pytest.raises(UnsafePathError):
        download_beneath(root, "pipe", tmp_path / "got")
