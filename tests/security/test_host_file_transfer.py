"""The host copies files into and out of a workspace the sandbox controls. A rollout that plants links
(or swaps a directory for one) must not make the host read or write anything outside the workspace."""

from __future__ import annotations

import contextlib
from pathlib import Path

import pytest

from containers.errors import ExecServerError
from containers.sandbox import Sandbox

REFUSED = (OSError, RuntimeError, ValueError, ExecServerError)


def planted_host_dir(sandbox: Sandbox, tmp_path: Path, link: str) -> Path:
    """A new, empty host directory outside the workspace, and `link` (its parents made) pointing at it."""
    outside = tmp_path / "outside"
    outside.mkdir()
    sandbox.exec(f"mkdir -p $(dirname {link}) && ln -s {outside} {link}")
    return outside


def test_download_of_a_link_to_a_host_file_does_not_read_it(
    sandbox: Sandbox, host_secret: Path, tmp_path: Path
) -> None:
    """ln -s <host secret> leak; the farm downloads `leak` as an artifact."""
    sandbox.exec(f"ln -s {host_secret} leak")
    out = tmp_path / "artifact"
    try:
        sandbox.download("leak", out)
    except REFUSED:
        return
    assert "HOST-SECRET" not in (out.read_text() if out.is_file() and not out.is_symlink() else "")
    assert not out.is_symlink()


def test_download_of_a_directory_holding_a_link_brings_no_host_file_and_no_link(
    sandbox: Sandbox, host_secret: Path, tmp_path: Path
) -> None:
    """mkdir out; ln -s <host secret> out/leak; ln -s / out/root; the farm downloads `out`."""
    sandbox.exec(f"mkdir out && echo ok > out/ok && ln -s {host_secret} out/leak && ln -s / out/root")
    dest = tmp_path / "out"
    sandbox.download("out", dest)
    assert (dest / "ok").read_text() == "ok\n"
    for name in ("leak", "root"):
        path = dest / name
        assert not path.is_symlink() or not Path(path.readlink()).is_absolute(), name
        if path.is_file():
            assert "HOST-SECRET" not in path.read_text()


def test_upload_through_a_planted_directory_link_writes_nothing_outside(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    """ln -s <host dir> target; the farm uploads a file to target/x (a prepare step)."""
    outside = planted_host_dir(sandbox, tmp_path, "target")
    payload = tmp_path / "payload"
    payload.write_text("planted\n")
    with contextlib.suppress(REFUSED):
        sandbox.upload(payload, "target/x")
    assert not (outside / "x").exists()


def test_upload_over_a_planted_file_link_does_not_overwrite_its_target(
    sandbox: Sandbox, host_secret: Path, tmp_path: Path
) -> None:
    """ln -s <host secret> config.json; the farm uploads config.json."""
    sandbox.exec(f"ln -s {host_secret} config.json")
    payload = tmp_path / "config.json"
    payload.write_text("{}\n")
    with contextlib.suppress(REFUSED):
        sandbox.upload(payload, "config.json")
    assert host_secret.read_text() == "HOST-SECRET-7731\n"


def test_upload_of_a_directory_into_a_planted_link_writes_nothing_outside(
    sandbox: Sandbox, tmp_path: Path
) -> None:
    """mkdir repo; ln -s <host dir> repo/sub; the farm uploads a directory with sub/ into repo."""
    outside = planted_host_dir(sandbox, tmp_path, "repo/sub")
    tree = tmp_path / "tree"
    (tree / "sub").mkdir(parents=True)
    (tree / "sub" / "f.py").write_text("x = 1\n")
    with contextlib.suppress(REFUSED):
        sandbox.upload(tree, "repo")
    assert list(outside.iterdir()) == []


def test_a_hard_link_to_a_host_file_cannot_be_made(sandbox: Sandbox) -> None:
    """ln /etc/passwd p: a hard link would let a later host-side copy carry the host file out."""
    result = sandbox.exec("ln /etc/passwd p 2>&1; ln /etc/shadow s 2>&1; ls")
    assert "p\n" not in result.stdout.splitlines(keepends=True) and "s\n" not in result.stdout


@pytest.mark.parametrize("remote", ["../escape", "/etc/escape", "sub/../../escape"])
def test_upload_outside_the_workspace_by_path_is_refused_or_stays_inside(
    sandbox: Sandbox, tmp_path: Path, remote: str
) -> None:
    payload = tmp_path / "p"
    payload.write_text("x\n")
    try:
        sandbox.upload(payload, remote)
    except REFUSED:
        return
    # the execution server writes as the sandbox's user inside its own read-only root: nothing on the host
    assert not Path("/etc/escape").exists()
