"""The start path the image runtimes share (containers/image_runtime.py), on a CLI that fails: the start
raises SandboxStartError naming the runtime, and the half-made sandbox is torn down (its directory gone)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from containers.apptainer import ApptainerRuntime
from containers.errors import SandboxStartError
from containers.spec import SandboxSpec


def test_a_failed_start_names_the_runtime_and_leaves_no_directory(tmp_path: Path) -> None:
    false = shutil.which("false")
    assert false is not None
    runtime = ApptainerRuntime(root=tmp_path, binary=false)  # `false instance start ...` exits 1
    with pytest.raises(SandboxStartError, match=r"^apptainer sandbox failed to start: Command .* status 1"):
        runtime.start(SandboxSpec(image="/nonexistent.sif", network=False, die_with_parent=False))
    assert list(tmp_path.iterdir()) == []
