"""Symlink and hardlink tricks against the host-side copies of the workspace (issue 14).

The sandbox plants links in its workspace; the host then uploads or downloads through the same path. A
host copy that follows the link reads or overwrites a host file outside the workspace.
"""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from containers.errors import ExecServerError
from containers.sandbox import Sandbox


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """A host directory outside every workspace holding a secret file."""
    directory = tmp_path / "host-private"
    directory.mkdir()
    (directory / "secret.txt").write_text("host-secret")
    return directory


def _plant(sandbox: Sandbox, link: str, target: Path) -> None:
    # The sandbox cannot see the host tmp dir, but a dangling link is still followed by a host-side copy.
    result = sandbox.exec(f"rm -rf {link}; ln -s {target} {link}")
    assert result.exit_code == 0, result.stderr


def test_download_through_file_symlink(sandbox: Sandbox, outside: Path, tmp_path: Path) -> None:
    """Plant loot -> /host/secret.txt; the host downloads 'loot' and gets the host file's content."""
    _plant(sandbox, "loot", outside / "secret.txt")
    got = tmp_path / "got"
    with contextlib.suppress(OSError, ExecServerError):
        sandbox.download("loot", got)
    assert not got.exists() or "host-secret" not in got.read_text()


def test_upload_through_file_symlink(sandbox: Sandbox, outside: Path, tmp_path: Path) -> None:
    """Plant target -> /host/secret.txt; the host uploads to 'target' and overwrites the host file."""
    _plant(sandbox, "target", outside / "secret.txt")
    source = tmp_path / "payload"
    source.write_text("overwritten")
    with contextlib.suppress(OSError, ExecServerError):
        sandbox.upload(source, "target")
    assert (outside / "secret.txt").read_text() == "host-secret"


def test_upload_through_directory_symlink(sandbox: Sandbox, outside: Path, tmp_path: Path) -> None:
    """Plant dir -> /host/private/; the host uploads to 'dir/new.txt' and creates a file outside."""
    _plant(sandbox, "dirlink", outside)
    source = tmp_path / "payload"
    source.write_text("planted")
    with contextlib.suppress(OSError, ExecServerError):
        sandbox.upload(source, "dirlink/new.txt")
    assert not (outside / "new.txt").exists()


def test_download_through_directory_symlink(sandbox: Sandbox, outside: Path, tmp_path: Path) -> None:
    """Plant dir -> /host/private/; the host downloads 'dirlink/secret.txt'."""
    _plant(sandbox, "dirlink2", outside)
    got = tmp_path / "got"
    with contextlib.suppress(OSError, ExecServerError):
        sandbox.download("dirlink2/secret.txt", got)
    assert not got.exists() or "host-secret" not in got.read_text()


def test_download_tree_keeps_inner_symlinks_as_links(sandbox: Sandbox, outside: Path, tmp_path: Path) -> None:
    """A downloaded directory holding a link to a host file must copy the link, not the host file."""
    sandbox.exec("mkdir -p tree")
    _plant(sandbox, "tree/leak", outside / "secret.txt")
    got = tmp_path / "tree"
    sandbox.download("tree", got)
    leak = got / "leak"
    assert leak.is_symlink() or not leak.exists()


def test_hardlink_to_host_file(sandbox: Sandbox) -> None:
    """Hard-link a host file visible read-only (/etc/passwd) into the workspace and write through it."""
    result = sandbox.exec("ln /etc/passwd hl && echo pwned >> hl")
    assert result.exit_code != 0
    assert "pwned" not in Path("/etc/passwd").read_text()
