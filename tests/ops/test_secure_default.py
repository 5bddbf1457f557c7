"""The recipes that put the API on the network create or require its token and say where it is: the
Apptainer `api` app and the Slurm head create one (0600, kept) when none is given and the API listens
beyond loopback; the scripts run here for real, with `farm` replaced by a stub that shows what it got."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.ops.conftest import OPS
from tests.ops.test_apptainer_def import sections

STUB = '#!/bin/sh\necho "token=${FARM_API_TOKEN:-} args=$*"\n'


@pytest.fixture
def stub_path(tmp_path: Path) -> str:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "farm").write_text(STUB)
    (bin_dir / "farm").chmod(0o755)
    return f"{bin_dir}:{Path(sys.executable).parent}:/usr/bin:/bin"


def apprun_api(tmp_path: Path, path: str, **env: str) -> subprocess.CompletedProcess[str]:
    script = sections()["apprun api"]
    base = {"PATH": path, "HOME": str(tmp_path / "home")}
    return subprocess.run(["sh", "-c", script, "api"], env={**base, **env}, capture_output=True, text=True)


def test_the_apptainer_api_app_creates_a_token_once_and_says_where(tmp_path: Path, stub_path: str) -> None:
    first = apprun_api(tmp_path, stub_path)
    assert first.returncode == 0, first.stderr
    file = tmp_path / "home" / ".rollout-farm" / "api-token"
    token = file.read_text().strip()
    assert len(token) == 64 and stat.S_IMODE(file.stat().st_mode) == 0o600
    assert f"token={token} args=api --host 0.0.0.0" in first.stdout
    assert str(file) in first.stderr
    again = apprun_api(tmp_path, stub_path)
    assert f"token={token} " in again.stdout  # kept: clients configured once keep working


def test_the_apptainer_api_app_uses_a_given_token_and_needs_none_on_loopback(
    tmp_path: Path, stub_path: str
) -> None:
    given = apprun_api(tmp_path, stub_path, FARM_API_TOKEN="mine")
    assert "token=mine " in given.stdout
    local = apprun_api(tmp_path, stub_path, FARM_API_HOST="127.0.0.1")
    assert "token= args=api --host 127.0.0.1" in local.stdout
    assert not (tmp_path / "home" / ".rollout-farm").exists()


def slurm_token(tmp_path: Path, bind: str) -> str:
    script = 'source "$FARM_OPS_DIR/lib.sh"; ensure_api_token; printf %s "${FARM_API_TOKEN:-}"'
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "FARM_OPS_DIR": str(OPS / "slurm"),
        "FARM_SHARED_DIR": str(tmp_path / "shared"),
        "FARM_BIND_HOST": bind,
    }
    (tmp_path / "shared").mkdir(exist_ok=True)
    result = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_the_slurm_head_creates_a_token_for_an_api_beyond_loopback(tmp_path: Path) -> None:
    token = slurm_token(tmp_path, "0.0.0.0")
    file = tmp_path / "shared" / "api-token"
    assert token == file.read_text() and len(token) == 64
    assert stat.S_IMODE(file.stat().st_mode) == 0o600
    assert slurm_token(tmp_path, "0.0.0.0") == token
    head = (OPS / "slurm" / "head.sh").read_text()
    assert head.index("ensure_api_token") < head.index("farm api")
    assert "FARM_API_TOKEN=%q" in head  # handed to every node through head.env (0600)


def test_the_slurm_head_needs_no_token_on_loopback(tmp_path: Path) -> None:
    assert slurm_token(tmp_path, "127.0.0.1") == ""
    assert not (tmp_path / "shared" / "api-token").exists()
