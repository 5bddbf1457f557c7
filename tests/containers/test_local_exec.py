"""The runtime interface on the local runtime: exec, files, cancel, attach from another process."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from containers import attach
from containers.errors import ExecServerError
from containers.local import LocalRuntime
from containers.sandbox import Sandbox
from containers.spec import SandboxSpec
from tests.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]


def test_exec_reports_output_exit_code_and_runs_in_workdir(sandbox: Sandbox) -> None:
    result = sandbox.exec("pwd; echo out; echo err >&2; exit 7")
    assert result.stdout == "/workspace\nout\n"
    assert result.stderr == "err\n"
    assert result.exit_code == 7 and not result.timed_out and not result.ok


def test_exec_cwd_env_and_stdin(sandbox: Sandbox) -> None:
    sandbox.exec("mkdir -p sub")
    result = sandbox.exec(
        "pwd; echo $GREETING; cat", cwd="/workspace/sub", env={"GREETING": "hi"}, stdin="fed"
    )
    assert result.stdout == "/workspace/sub\nhi\nfed"


def test_exec_environment_does_not_leak_from_host(sandbox: Sandbox, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("FARM_SECRET_TOKEN", "leak")
    assert "FARM_SECRET_TOKEN" not in sandbox.exec("env").stdout


def test_exec_timeout_kills_the_command(sandbox: Sandbox) -> None:
    started = time.monotonic()
    result = sandbox.exec("echo started; sleep 30", timeout=0.5)
    assert result.timed_out and result.stdout == "started\n"
    assert time.monotonic() - started < 3


def test_exec_background_child_does_not_hold_the_call(sandbox: Sandbox) -> None:
    started = time.monotonic()
    result = sandbox.exec("sleep 20 & echo bg")
    assert result.stdout == "bg\n" and time.monotonic() - started < 2


def test_exec_output_is_truncated_with_a_note(sandbox: Sandbox) -> None:
    result = sandbox.exec("head -c 100000 /dev/zero | tr '\\0' x", output_limit=1000)
    assert len(result.stdout) < 1200 and "bytes omitted" in result.stdout


def test_upload_and_download_inside_and_outside_the_workspace(sandbox: Sandbox, tmp_path: Path) -> None:
    source = tmp_path / "src"
    (source / "pkg").mkdir(parents=True)
    (source / "pkg" / "mod.py").write_text("X = 1\n")
    (source / "note.txt").write_text("hello")
    sandbox.upload(source, "/workspace/proj")
    sandbox.upload(source / "note.txt", "/tmp/elsewhere/note.txt")
    assert sandbox.exec("cat /workspace/proj/pkg/mod.py /tmp/elsewhere/note.txt").stdout == "X = 1\nhello"
    sandbox.exec("echo made > /tmp/made.txt; mkdir -p /tmp/d/e; echo deep > /tmp/d/e/f")
    sandbox.download("/tmp/made.txt", tmp_path / "made.txt")
    sandbox.download("/tmp/d", tmp_path / "d")
    sandbox.download("proj/pkg", tmp_path / "pkg")
    assert (tmp_path / "made.txt").read_text() == "made\n"
    assert (tmp_path / "d" / "e" / "f").read_text() == "deep\n"
    assert (tmp_path / "pkg" / "mod.py").read_text() == "X = 1\n"


def test_cancel_during_a_long_command_returns_fast_and_kills_it(sandbox: Sandbox) -> None:
    results = []
    worker = threading.Thread(
        target=lambda: results.append(sandbox.exec("sleep 60; echo never", timeout=120))
    )
    worker.start()
    _wait_running(sandbox, "sleep")
    started = time.monotonic()
    reply = sandbox.cancel()
    worker.join(timeout=10)
    # Well under the command's 60 s: the cancel did not wait for it (a bound of 1 s, a latency figure
    # rather than this behaviour, failed on a loaded machine).
    assert time.monotonic() - started < 10
    assert not worker.is_alive()
    assert reply["commands"] == 1
    assert results[0].cancelled and results[0].exit_code == -9 and "never" not in results[0].stdout
    assert "sleep 60" not in sandbox.exec("ps -eo args").stdout


def _wait_running(sandbox: Sandbox, name: str) -> None:
    """Until a process called `name` runs in the sandbox, asked over a second connection (one client
    serves one call at a time); starting a command is slow on a loaded machine."""
    watcher = attach(sandbox.handle())

    def running() -> bool:
        return watcher.exec(["pgrep", "-x", name]).exit_code == 0

    wait_until(running, 15, interval_s=0.05, what=f"{name} to run in the sandbox")


def _cancel_a_busy_bash_tool(sandbox: Sandbox) -> tuple[float, list, list]:
    results: list = []
    worker = threading.Thread(target=lambda: results.append(sandbox.tool("bash", command="sleep 60")))
    worker.start()
    # The first bash call starts the shell, which is slow on a loaded machine: wait until the command runs.
    _wait_running(sandbox, "sleep")
    started = time.monotonic()
    cancelled = sandbox.cancel()["tools"]
    worker.join(timeout=5)
    return time.monotonic() - started, cancelled, results


def test_cancel_interrupts_a_busy_bash_tool(runtime: LocalRuntime) -> None:
    with runtime.start(SandboxSpec()) as sandbox:
        took, cancelled, results = _cancel_a_busy_bash_tool(sandbox)
        assert "bash" in cancelled
        assert took < 1.0 and results[0].exit_code == 130
        assert sandbox.tool("bash", command="echo alive").output == "alive\n"


def test_cancel_works_when_the_starting_process_ignores_sigint(runtime: LocalRuntime) -> None:
    """A worker started in the background by a script inherits SIGINT ignored, and so would every
    process in its sandboxes: the bash tool's Ctrl-C would then interrupt nothing."""
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        sandbox = runtime.start(SandboxSpec())
    finally:
        signal.signal(signal.SIGINT, previous)
    with sandbox:
        took, cancelled, results = _cancel_a_busy_bash_tool(sandbox)
        assert "bash" in cancelled
        assert took < 1.0 and results[0].exit_code == 130


ATTACH_SCRIPT = """
import json, sys
from containers import attach
sandbox = attach(json.loads(sys.argv[1]))
print(sandbox.exec("cat /workspace/from_parent.txt").stdout, end="")
sandbox.exec("echo child > /workspace/from_child.txt")
if sys.argv[2] == "stop":
    sandbox.stop()
"""


def test_a_sandbox_is_used_and_stopped_from_another_process(runtime: LocalRuntime) -> None:
    sandbox = runtime.start(SandboxSpec(die_with_parent=False))
    handle = sandbox.handle()
    json.dumps(handle)
    sandbox.exec("echo parent > /workspace/from_parent.txt")
    run = [sys.executable, "-c", ATTACH_SCRIPT, json.dumps(handle)]
    used = subprocess.run([*run, "keep"], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert used.stdout == "parent\n", used.stderr
    assert (sandbox.workspace / "from_child.txt").read_text() == "child\n"
    stopped = subprocess.run([*run, "stop"], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert stopped.returncode == 0, stopped.stderr
    assert not Path(handle["sandbox_dir"]).exists()
    with pytest.raises(ExecServerError):
        attach(handle).exec("true")
    sandbox.stop()  # idempotent after a stop from elsewhere


def test_ttl_ends_the_sandbox(runtime: LocalRuntime) -> None:
    sandbox = runtime.start(SandboxSpec(ttl_s=0.5))
    assert sandbox.ping()
    wait_until(lambda: not sandbox.ping(), 10, what="the sandbox to end at its 0.5 s ttl")
    sandbox.stop()
