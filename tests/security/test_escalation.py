"""Privilege: a sandbox is an unprivileged host uid with no capability, no way to gain one, and nothing of
the host's process tree, mounts or kernel settings within reach."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from containers.sandbox import Sandbox


def test_the_sandbox_is_not_root_on_the_host(sandbox: Sandbox) -> None:
    """Whatever uid it sees inside, the host sees an unprivileged uid (root farms drop to one)."""
    status = Path(f"/proc/{sandbox.info.init_pid}/status").read_text()
    host_uids = next(line for line in status.splitlines() if line.startswith("Uid:")).split()[1:]
    server = sandbox.exec("cat /proc/self/status").stdout
    assert "0" not in host_uids or os.geteuid() != 0
    assert "CapEff:\t0000000000000000" in server and "CapPrm:\t0000000000000000" in server
    assert "NoNewPrivs:\t1" in server


def test_mount_and_remount_are_refused(sandbox: Sandbox) -> None:
    result = sandbox.exec(
        "mount -t tmpfs none /mnt 2>&1; mount -o remount,rw / 2>&1; echo x > /usr/escape 2>&1"
    )
    assert "permission denied" in result.stdout.lower() or "must be superuser" in result.stdout.lower()
    assert not Path("/usr/escape").exists()


def test_a_new_user_namespace_grants_nothing_on_host_files(sandbox: Sandbox) -> None:
    """unshare -r makes the process 'root' of a namespace of its own: host files stay out of reach."""
    result = sandbox.exec("unshare -r sh -c 'id -u; cat /etc/shadow; echo x > /etc/escape' 2>&1")
    assert "root:" not in result.stdout
    assert not Path("/etc/escape").exists()


def test_setuid_programs_do_not_elevate(sandbox: Sandbox) -> None:
    result = sandbox.exec("ls -l /usr/bin/su /usr/bin/passwd 2>&1; su -c id root </dev/null 2>&1; id -u")
    assert result.stdout.strip().splitlines()[-1] != "0"


def test_the_namespace_init_holds_nothing_worth_taking_over(sandbox: Sandbox) -> None:
    """ptrace/kill of pid 1 (bwrap's reaper) would gain nothing: it has no capability either."""
    status = sandbox.exec("cat /proc/1/status").stdout
    for field in ("CapPrm", "CapEff", "CapBnd", "CapAmb"):
        assert f"{field}:\t0000000000000000" in status, field


def test_no_host_process_is_visible_or_signalable(sandbox: Sandbox) -> None:
    pids = sandbox.exec("ls /proc | grep -E '^[0-9]+$' | wc -l").stdout.strip()
    assert int(pids) < 20  # the sandbox's own few processes, not the host's hundreds
    result = sandbox.exec(f"kill -9 {os.getpid()} 2>&1; echo $?")
    assert result.stdout.strip().endswith("1")  # no such process in the sandbox's pid namespace


@pytest.mark.parametrize(
    "target",
    ["/proc/sys/kernel/hostname", "/proc/sysrq-trigger", "/sys/kernel/mm/transparent_hugepage/enabled"],
)
def test_kernel_settings_cannot_be_written(sandbox: Sandbox, target: str) -> None:
    before = Path(target).read_text() if Path(target).exists() and target != "/proc/sysrq-trigger" else None
    sandbox.exec(f"echo 1 > {target}")
    if before is not None:
        assert Path(target).read_text() == before


def test_no_host_device_is_reachable(sandbox: Sandbox) -> None:
    devices = sandbox.exec("ls /dev").stdout.split()
    assert not [d for d in devices if d.startswith(("sd", "nvme", "vd", "mem", "kmem", "port"))]
