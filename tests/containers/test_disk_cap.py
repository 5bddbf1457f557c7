"""The workspace disk cap is on by default (issue 30, item 7): a sandbox whose workspace grows past it is
ended, and every later operation on it, from any process, raises SandboxLimitExceeded: the job ends with
that resource failure instead of going on (on main one job wrote 6 GB with only a per-file limit)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest

from containers import SandboxLimitExceeded, workspace_fs
from containers.disk_watch import DEFAULT_DISK_MB, default_cap_mb, exceeded, usage_bytes
from containers.local import LocalRuntime
from containers.runtime import attach
from containers.spec import SandboxSpec
from farm.agent.loop import Episode, _run_tool
from farm.agent.tools import FunctionTool
from tests.waiting import wait_until

FILL = "for i in $(seq 40); do head -c 2000000 /dev/zero > f$i || exit 1; sleep 0.1; done; echo filled"


def test_the_cap_is_on_by_default_and_sized_for_repositories() -> None:
    assert default_cap_mb({}) == DEFAULT_DISK_MB >= 10240
    assert default_cap_mb({"FARM_SANDBOX_DISK_MB": "512"}) == 512
    assert default_cap_mb({"FARM_SANDBOX_DISK_MB": "0"}) is None


def test_a_sandbox_is_started_with_the_default_cap(runtime: LocalRuntime) -> None:
    with runtime.start(SandboxSpec()) as sandbox:
        assert sandbox.info.disk_cap_mb == DEFAULT_DISK_MB


def test_a_workspace_past_its_cap_ends_the_sandbox(
    runtime: LocalRuntime, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FARM_SANDBOX_DISK_MB", "16")
    sandbox = runtime.start(SandboxSpec())
    try:
        assert sandbox.info.disk_cap_mb == 16
        started = time.monotonic()
        if workspace_fs.usage(str(sandbox.workspace)) is not None:
            # its own filesystem: the kernel stops the write at the cap; the watch then ends the sandbox
            fill = sandbox.exec(FILL, timeout=60)
            assert fill.exit_code != 0 and "No space left" in fill.stderr
            wait_until(  # the marker is written just before the kill
                lambda: exceeded(sandbox.info) and not sandbox.ping(),
                10,
                what="the watch to end the full sandbox",
            )
            with pytest.raises(SandboxLimitExceeded, match="16 MB disk cap"):
                sandbox.exec("true", timeout=10)
        else:
            with pytest.raises(SandboxLimitExceeded, match="16 MB disk cap"):
                sandbox.exec(FILL, timeout=60)  # 80 MB in 2 MB files, each under the per-file limit
        assert time.monotonic() - started < 30
        marker = exceeded(sandbox.info)
        assert marker is not None and marker["limit"] == "disk" and int(str(marker["used_mb"])) >= 14
        assert usage_bytes(str(sandbox.workspace)) < 80 << 20  # stopped well before the end
        # from another worker's attach, and through a tool call, the same resource failure
        with pytest.raises(SandboxLimitExceeded):
            attach(sandbox.handle()).exec("true", timeout=10)
        with pytest.raises(SandboxLimitExceeded):
            sandbox.tool("bash", command="true", timeout=10)
    finally:
        sandbox.stop()


def test_the_agent_loop_ends_the_job_instead_of_showing_the_policy() -> None:
    def tool(arguments: dict[str, Any]) -> str:
        raise SandboxLimitExceeded("over the cap")

    tools = {"bash": FunctionTool("bash", "run", {"type": "object"}, tool)}
    with pytest.raises(SandboxLimitExceeded):
        _run_tool(tools, "bash", {}, Episode(conversation=None))  # type: ignore[arg-type]


@pytest.mark.skipif(workspace_fs.unavailable() is not None, reason="no per-sandbox filesystem on this host")
@pytest.mark.parametrize("fill_mb", [32, 200])  # the control under the cap, the attack past it
def test_fallocate_past_the_cap_fails_inside_and_the_host_holds_at_most_the_cap(
    runtime: LocalRuntime, monkeypatch: pytest.MonkeyPatch, fill_mb: int
) -> None:
    """On main, three 2 GiB fallocates under a 2 GiB cap all succeeded (6 GiB on the host) before the watch
    ended the job: here, past the cap, the call itself fails, and the host's disk never holds more."""
    monkeypatch.setenv("FARM_SANDBOX_DISK_MB", "64")
    with runtime.start(SandboxSpec()) as sandbox:
        image = Path(sandbox.info.sandbox_dir) / workspace_fs.IMAGE
        script = (
            f"for i in 1 2 3; do fallocate -l {fill_mb}M f$i && head -c {fill_mb}M /dev/urandom > f$i; done"
        )
        result = sandbox.exec(script + "; echo done", timeout=60)
        peak = image.stat().st_blocks * 512
        assert peak <= (64 + 1) << 20  # the cap, plus the filesystem's own metadata at most
        if fill_mb * 3 <= 64:
            assert result.exit_code == 0 and "No space" not in result.stderr
        else:
            assert "fallocate failed: No space left on device" in result.stderr
