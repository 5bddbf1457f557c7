"""Every shell script in ops/ parses (`bash -n`) and is shellcheck-clean."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.ops.conftest import OPS, tool


def shell_scripts() -> list[Path]:
    found = []
    for path in sorted(OPS.rglob("*")):
        if not path.is_file():
            continue
        first = path.read_text(errors="replace").split("\n", 1)[0]
        sourced = path.name.endswith(".env.example") and path.parent.name == "slurm"
        if path.suffix in (".sh", ".sbatch") or sourced or (first.startswith("#!") and "bash" in first):
            found.append(path)
    return found


SCRIPTS = shell_scripts()
IDS = [str(p.relative_to(OPS)) for p in SCRIPTS]


def test_the_slurm_launchers_are_all_found() -> None:
    names = {p.name for p in SCRIPTS}
    node_scripts = {"head.sh", "cpu-node.sh", "gpu-node.sh", "lib.sh", "farm-exec", "llm-exec"}
    batch_scripts = {"head.sbatch", "cpu.sbatch", "gpu.sbatch", "farm-hetjob.sbatch", "submit.sh"}
    assert node_scripts | batch_scripts | {"farm.env.example"} <= names


@pytest.mark.parametrize("script", SCRIPTS, ids=IDS)
def test_bash_parses(script: Path) -> None:
    result = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("script", SCRIPTS, ids=IDS)
def test_shellcheck_clean(script: Path) -> None:
    shellcheck = tool("shellcheck")
    result = subprocess.run(
        [shellcheck, "--shell=bash", "--external-sources", f"--source-path={script.parent}", str(script)],
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.mark.parametrize(
    "script", [p for p in SCRIPTS if p.name not in ("lib.sh", "farm.env.example")], ids=lambda p: p.name
)
def test_entry_points_are_executable_and_strict(script: Path) -> None:
    text = script.read_text()
    assert script.stat().st_mode & 0o111, f"{script.name} is not executable"
    assert text.startswith("#!/usr/bin/env bash\n")
    assert "set -euo pipefail" in text


@pytest.mark.parametrize("script", sorted((OPS / "slurm").glob("*.sbatch")), ids=lambda p: p.name)
def test_sbatch_directives_come_before_any_command(script: Path) -> None:
    """sbatch stops reading #SBATCH lines at the first command."""
    seen_command = False
    for line in script.read_text().splitlines()[1:]:
        stripped = line.strip()
        if stripped.startswith("#SBATCH"):
            assert not seen_command, f"{script.name}: '{stripped}' comes after a command and is ignored"
        elif stripped and not stripped.startswith("#"):
            seen_command = True
