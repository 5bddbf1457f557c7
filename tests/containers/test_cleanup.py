"""Teardown leaves nothing behind: no process (pasta included), no directory, no cgroup, no mount."""

from __future__ import annotations

import os
import secrets
from pathlib import Path

import pytest

from containers import limits_host as host_limits
from containers import workspace_fs
from containers.local import LocalRuntime
from containers.net_check import network_unavailable
from containers.procs import CGROUP_PARENT
from containers.spec import SandboxSpec
from tests.waiting import wait_until

from .conftest import sandbox_processes


def _children_of_this_process() -> set[int]:
    children: set[int] = set()
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        children.update(int(pid) for pid in (task / "children").read_text().split())
    return children


def _cgroups_left(sandbox_ids: list[str]) -> list[str]:
    """Groups of these sandboxes still there (other runs on the machine share the parents)."""
    parents = [root / CGROUP_PARENT for root in (Path("/sys/fs/cgroup/pids"), Path("/sys/fs/cgroup"))]
    parents += [p for p in (host_limits._parent(c) for c in ("pids", "memory", "cpu")) if p is not None]
    return [str(p / f"sb-{i}") for p in parents for i in sandbox_ids if (p / f"sb-{i}").exists()]


@pytest.mark.slow
def test_hundred_start_exec_stop_cycles_leave_nothing_behind(tmp_path: Path) -> None:
    runtime = LocalRuntime(root=tmp_path / "cycles")
    children_before, ids = _children_of_this_process(), []
    # A duration no other run of this test uses, so the scan below finds only this run's processes.
    duration = f"300.{secrets.randbelow(10**6):06d}"
    for i in range(100):
        sandbox = runtime.start(SandboxSpec(network=i % 10 == 0 and network_unavailable() is None))
        ids.append(sandbox.id)
        # every cycle leaves a process that escaped the process group: only the pid namespace kill gets it
        result = sandbox.exec(f"setsid sleep {duration} & echo {i}")
        assert result.stdout == f"{i}\n"
        sandbox.stop()
    workspace_fs.drain()  # the workspace filesystems' unmounts run in the background
    assert sandbox_processes(runtime.root) == []
    assert _children_of_this_process() - children_before == set()
    assert [p.name for p in runtime.root.iterdir() if not p.name.startswith(".")] == []
    assert _cgroups_left(ids) == []
    assert str(runtime.root) not in Path("/proc/self/mountinfo").read_text()
    _wait_none_running(b"sleep\x00" + duration.encode(), within_s=5.0)


def _wait_none_running(cmdline_prefix: bytes, within_s: float) -> None:
    """No process's command line starts with the prefix (a process killed a moment ago may still be on
    its way out of /proc on a loaded machine)."""
    wait_until(
        lambda: [p for p in Path("/proc").glob("[0-9]*") if _cmdline(p).startswith(cmdline_prefix)],
        within_s,
        accept=lambda found: found == [],
        interval_s=0.05,
        what=f"no process running {cmdline_prefix!r}",
    )


def _cmdline(proc: Path) -> bytes:
    try:
        return (proc / "cmdline").read_bytes()
    except OSError:
        return b""


def test_a_dead_starter_does_not_leak_a_die_with_parent_sandbox(tmp_path: Path) -> None:
    import subprocess
    import sys

    script = (
        "import sys; from containers.local import LocalRuntime; from containers.spec import SandboxSpec\n"
        f"sandbox = LocalRuntime(root={str(tmp_path / 'dwp')!r}).start(SandboxSpec())\n"
        "sandbox.exec('setsid sleep 301 &')\n"
        "print(sandbox.info.init_pid, flush=True)\n"
        "import os; os._exit(0)\n"
    )
    repo = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=repo, timeout=60)
    init_pid = int(out.stdout.split()[0])
    wait_until(lambda: not Path(f"/proc/{init_pid}").exists(), 5, what=f"the sandbox's init {init_pid} gone")
    assert not [p for p in Path("/proc").glob("[0-9]*") if _cmdline(p).startswith(b"sleep\x00301")]
    # its directory (and workspace filesystem) wait for the orphan sweep; this test has none: tear down
    from containers.local import read_recorded

    runtime = LocalRuntime(root=tmp_path / "dwp")
    for directory in (tmp_path / "dwp").iterdir():
        if not directory.name.startswith("."):
            runtime.teardown(read_recorded(directory))


@pytest.mark.skipif(
    workspace_fs.unavailable() is not None,
    reason=f"no workspace filesystems here: {workspace_fs.unavailable()}",
)
def test_a_sandbox_directory_left_with_its_workspace_mounted_is_removed(tmp_path: Path) -> None:
    """A starter killed after mounting the workspace and before recording the sandbox (the chaos test met it:
    two directories left, 'Device or resource busy', retried hourly): the sweep's removal unmounts it."""
    from containers.local import remove_sandbox_dir

    sandbox_dir = tmp_path / "sandboxes" / "abc123def456"
    workspace = sandbox_dir / "workspace"
    workspace.mkdir(parents=True)
    assert workspace_fs.mount(sandbox_dir, workspace, 64, None, None)
    (workspace / "file").write_text("left by the rollout")
    assert os.path.ismount(workspace)
    assert remove_sandbox_dir(sandbox_dir) is None
    assert not sandbox_dir.exists()
