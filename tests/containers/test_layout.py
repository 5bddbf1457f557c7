"""The directories and handle an image runtime (Apptainer, Docker) starts a sandbox with."""

from __future__ import annotations

import stat
from pathlib import Path

import pytest

from containers import SandboxError, SandboxSpec
from containers.layout import check_same_node, new_sandbox


def test_new_sandbox_makes_private_dirs_and_a_matching_handle(tmp_path: Path) -> None:
    handle, workspace, control = new_sandbox(tmp_path, "docker", SandboxSpec(ttl_s=30))
    for path in (Path(handle.sandbox_dir), workspace, control):
        assert path.is_dir() and stat.S_IMODE(path.stat().st_mode) == 0o700
    assert Path(handle.workspace) == workspace and Path(handle.socket_path).parent == control
    assert handle.runtime == "docker" and handle.name == f"farm-{handle.id}"
    assert handle.expires_at == pytest.approx(handle.created_at + 30)
    check_same_node(handle)
    with pytest.raises(SandboxError, match="lives on node"):
        check_same_node(handle.model_copy(update={"node": "another-node"}))
