"""What a local sandbox leaves running on the host (issue 30, item 7): pasta holds neither root nor any
capability on the host, and the process that started sandboxes keeps no zombie launchers, whoever
stopped them (the init worker starts a job's sandbox, the run worker or the orphan sweep stops it)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from containers.local import LocalRuntime
from containers.net_check import network_unavailable
from containers.spec import SandboxSpec
from tests.procfs import process_stats
from tests.waiting import wait_until


def status(pid: int) -> dict[str, str]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return fields


def zombie_children() -> list[str]:
    """Zombies whose parent is this process (its launchers never waited for)."""
    return [
        f"{proc.name} {name}"
        for proc, name, fields in process_stats()
        if fields[0] == "Z" and int(fields[1]) == os.getpid()
    ]


@pytest.mark.skipif(network_unavailable() is not None, reason=str(network_unavailable()))
def test_pasta_runs_without_root_or_host_capabilities(runtime: LocalRuntime) -> None:
    with runtime.start(SandboxSpec(network=True)) as sandbox:
        assert sandbox.info.net_pid is not None
        fields = status(sandbox.info.net_pid)
        uids = fields["Uid"].split() + fields["Gid"].split()
        assert "0" not in uids, fields["Uid"]
        if os.geteuid() == 0:
            assert uids == [str(sandbox.info.uid)] * 4 + [str(sandbox.info.gid)] * 4
        assert fields["NoNewPrivs"] == "1" and fields["Seccomp"] == "2"
        # Whatever pasta keeps (CapEff) is held in the sandbox's own user namespace, never the host's.
        own_userns = os.readlink(f"/proc/{sandbox.info.net_pid}/ns/user")
        assert int(fields["CapEff"], 16) == 0 or own_userns != os.readlink("/proc/self/ns/user")
        assert "ok" in sandbox.exec("echo ok").stdout


def test_no_zombie_launchers_remain(runtime: LocalRuntime) -> None:
    networks = [False, True] if network_unavailable() is None else [False]
    for network in networks:
        for _ in range(3):
            runtime.start(SandboxSpec(network=network)).stop()
    assert zombie_children() == []
    # stopped by another process, as the run worker or the orphan sweep does
    handles = [runtime.start(SandboxSpec(network=n)).handle() for n in networks * 2]
    stop_elsewhere = (
        "import json, sys\n"
        "from containers.runtime import attach\n"
        "for handle in json.loads(sys.argv[1]):\n"
        "    attach(handle).stop()\n"
    )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    subprocess.run([sys.executable, "-c", stop_elsewhere, json.dumps(handles)], check=True, env=env)
    wait_until(lambda: zombie_children() == [], timeout_s=10, what="the launchers are reaped")
