"""Network sandboxes on a host whose tun device only root may open (mode 0600, as on many hosts and VMs):
run as root, the farm hands pasta a private copy of the device owned by the sandbox's user and the
sandbox starts; run as a user, the capability is refused at once in one line naming the cause and the
fix, never with pasta's own stderr. Each case beside its control (the kernel's default 0666 device).

The 0600 device is made for the test's driver only: a private mount namespace (`unshare -m`) with a copy
of the device node (mknod 10,200) bound over /dev/net/tun; the host's node is never changed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from containers.identity import HostIdentity
from containers.net_check import TUN_MAJOR, TUN_MINOR, network_problem, tun_opens_for

from .test_unprivileged import NOBODY, SYSTEM_PYTHON, staged  # noqa: F401  (the fixture)

REPO = Path(__file__).resolve().parents[2]
needs_tools = pytest.mark.skipif(
    not all(shutil.which(t) for t in ("pasta", "nft", "nsenter", "unshare"))
    or not Path("/dev/net/tun").exists(),
    reason="needs pasta (Debian passt), nft (nftables), nsenter, unshare and a tun device",
)
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="makes a device node and a mount namespace: root only")

DRIVER = r"""
import json, sys, time
sys.path.insert(0, sys.argv[1])
from containers.local import LocalRuntime
from containers.spec import SandboxSpec
runtime = LocalRuntime(root=sys.argv[2], bwrap=sys.argv[3] if len(sys.argv) > 3 else None)
report = {}
started = time.monotonic()
try:
    with runtime.start(SandboxSpec(network=True)) as sandbox:
        report["interfaces"] = sandbox.exec("ls /sys/class/net").stdout.split()
        report["filtered"] = "ConnectionRefused" in sandbox.exec(
            "python3 -c \"import socket; socket.create_connection(('10.1.2.3', 80), 3)\"").stderr
except Exception as error:
    report["error"] = f"{type(error).__name__}: {error}"
report["seconds"] = time.monotonic() - started
print(json.dumps(report))
"""

# bind a fresh node of the tun device, with the given mode, over /dev/net/tun in this mount namespace only
WITH_TUN_MODE = """set -e
d=$(mktemp -d)
mount -t tmpfs -o mode=0755 tun-copy "$d"
mknod -m "$0" "$d/tun" c 10 200
mount --bind "$d/tun" /dev/net/tun
exec "$@"
"""


def _drive(mode: str, prefix: list[str], python: str, args: list[str], tmp: Path) -> dict[str, object]:
    driver = tmp / "driver.py"
    driver.write_text(DRIVER)
    os.chmod(tmp, 0o755)
    os.chmod(driver, 0o644)
    command = ["unshare", "-m", "--propagation", "private", "sh", "-c", WITH_TUN_MODE, mode]
    command += [*prefix, python, str(driver), *args]
    run = subprocess.run(
        command, capture_output=True, text=True, timeout=60, env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"}
    )
    assert run.returncode == 0, run.stderr[-3000:]
    report: dict[str, object] = json.loads(run.stdout.strip().splitlines()[-1])
    return report


@needs_tools
@as_root
@pytest.mark.parametrize("mode", ["0666", "0600"])
def test_a_root_farm_starts_network_sandboxes_whatever_the_tun_mode(mode: str, tmp_path: Path) -> None:
    sandboxes = tmp_path / "sandboxes"
    sandboxes.mkdir()
    report = _drive(mode, [], sys.executable, [str(REPO), str(sandboxes)], tmp_path)
    assert "error" not in report, report
    assert "eth0" in report["interfaces"] and report["filtered"]  # type: ignore[operator]
    assert list(sandboxes.iterdir()) == []  # the driver's exit finished the background removals


@needs_tools
@as_root
@pytest.mark.parametrize("mode", ["0666", "0600"])
def test_a_user_farm_refuses_network_at_once_when_it_cannot_open_the_tun(mode: str, staged: Path) -> None:  # noqa: F811
    bwrap = staged / "bwrap" / "pkg" / "_bin" / "bwrap"
    prefix = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]
    report = _drive(
        mode, prefix, SYSTEM_PYTHON, [str(staged / "lib"), str(staged / "sandboxes"), str(bwrap)], staged
    )
    if mode == "0666":
        assert "error" not in report, report
        assert "eth0" in report["interfaces"]  # type: ignore[operator]
        return
    error = str(report["error"])
    assert error.startswith("RuntimeUnavailable: network sandboxes unavailable: /dev/net/tun (mode 600)")
    assert "chmod 0666 /dev/net/tun" in error and "\n" not in error and "pasta failed" not in error
    assert float(report["seconds"]) < 1.0  # type: ignore[arg-type]
    assert list((staged / "sandboxes").iterdir()) == []


@as_root
def test_the_tun_check_reads_the_device_mode_for_the_sandbox_user(tmp_path: Path) -> None:
    device = tmp_path / "tun"
    os.mknod(device, 0o600 | 0o020000, os.makedev(TUN_MAJOR, TUN_MINOR))
    device.chmod(0o600)
    nobody = HostIdentity(NOBODY, NOBODY)
    assert not tun_opens_for(nobody, str(device))
    assert tun_opens_for(HostIdentity(0, 0), str(device))
    device.chmod(0o666)
    assert tun_opens_for(nobody, str(device))


def test_a_missing_tun_device_is_named_with_its_fix(tmp_path: Path) -> None:
    if shutil.which("pasta") is None:
        pytest.skip("needs pasta")
    problem = network_problem(None, str(tmp_path / "no-tun"))
    assert problem is not None and "no tun device" in problem and "modprobe tun" in problem
