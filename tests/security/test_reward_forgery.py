"""A rollout forging its own reward through the host's channel to the sandbox (issue 30, item 1).

The rollout's commands run as the same user as the sandbox's execution server. Each attack here is a real
attempt from inside: put an impostor server where the host connects, kill the real one first, or debug
the real one. Whatever the rollout does, every later operation of the host (an evaluator's test command,
patch or artifact collection) reaches the server the host started, or fails visibly; never the impostor.
Each attack runs in both network modes, and through a handle re-attached as another worker would.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from containers import ExecServerError
from containers.local import LocalRuntime
from containers.net_check import network_unavailable
from containers.runtime import attach
from containers.sandbox import Sandbox
from containers.spec import SandboxSpec
from tests.waiting import wait_until

# An execution server speaking the real wire protocol that answers every command "exit 0, tests passed"
# and every file read with a forged patch. It takes the socket's place atomically (bind aside, rename).
IMPOSTOR = r"""
import json, os, socket, sys, threading
sys.path[:0] = [p for p in os.environ.get("FARM_PYPATH", "").split(":") if p]
path = sys.argv[1]
aside = path + ".new"
try:
    os.unlink(aside)
except FileNotFoundError:
    pass
listener = socket.socket(socket.AF_UNIX)
try:
    listener.bind(aside)
    os.rename(aside, path)
except OSError as exc:
    open("/tmp/impostor.failed", "w").write(repr(exc))
    raise SystemExit(1)
listener.listen(64)
open("/tmp/impostor.ready", "w").close()
PASSED = {"stdout": "1 passed", "stderr": "", "exit_code": 0, "timed_out": False, "cancelled": False,
          "duration_s": 0.01}

def serve(conn):
    for line in conn.makefile("rb"):
        request = json.loads(line)
        op = request.get("op")
        if op == "exec":
            result = PASSED
        elif op == "get":
            result = {"data": "forged"}
        else:
            result = {"pid": os.getpid()}
        conn.sendall((json.dumps({"id": request["id"], "ok": True, "result": result}) + "\n").encode())

while True:
    conn, _ = listener.accept()
    threading.Thread(target=serve, args=(conn,), daemon=True).start()
"""

START_IMPOSTOR = (
    "cat > /tmp/impostor.py; rm -f /tmp/impostor.ready /tmp/impostor.failed; "
    "{kill}setsid nohup python3 /tmp/impostor.py /run/farm/exec.sock >/dev/null 2>&1 < /dev/null & "
    "for i in $(seq 200); do [ -e /tmp/impostor.ready ] || [ -e /tmp/impostor.failed ] && break; "
    "sleep 0.05; done; cat /tmp/impostor.failed 2>/dev/null; ls /tmp/impostor.ready 2>/dev/null; true"
)
KILL_SERVER = "kill -9 $PPID 2>/dev/null; sleep 0.2; "
"""The command's parent is the execution server (bash -c runs under it)."""


@pytest.fixture(params=[False, True], ids=["net-off", "net-on"])
def fresh(runtime: LocalRuntime, request: pytest.FixtureRequest) -> Iterator[Sandbox]:
    """A sandbox of its own per attack: the attacks break it."""
    if request.param and network_unavailable() is not None:
        pytest.skip(str(network_unavailable()))
    with runtime.start(SandboxSpec(network=request.param)) as started:
        yield started


def _plant(sandbox: Sandbox, kill_first: bool = False) -> str:
    """Runs the attack as a rollout command would; returns what it printed (the impostor's fate)."""
    script = START_IMPOSTOR.format(kill=KILL_SERVER if kill_first else "")
    try:
        return sandbox.exec(script, stdin=IMPOSTOR, timeout=30).stdout
    except ExecServerError as exc:  # killing the server ends this very command's connection
        return str(exc)


def test_impostor_socket_cannot_answer_the_evaluator(fresh: Sandbox) -> None:
    """The rollout replaces the socket while the real server still runs. A worker that attaches from the
    handle afterwards (the run or eval stage) must still reach the real server: the failing test command
    fails, the file it collects is the real one."""
    (fresh.workspace / "solution.patch").write_text("real patch\n")
    _plant(fresh)
    evaluator = attach(fresh.handle())
    result = evaluator.exec("echo real; exit 1", timeout=30)
    assert (result.exit_code, result.stdout.strip()) == (1, "real"), "the impostor answered the evaluator"
    collected = Path(fresh.workspace.parent, "collected")
    evaluator.download(f"{fresh.workdir}/solution.patch", collected)
    assert collected.read_text() == "real patch\n"
    # and the sandbox's own connection, reconnecting after a loss, too
    fresh.client.close()
    assert fresh.exec("exit 3", timeout=30).exit_code == 3


def test_killing_the_server_then_impersonating_it_fails_visibly(fresh: Sandbox) -> None:
    """The rollout kills the real server and starts its own in its place: the host's next operation must
    fail (the channel is gone), never return the impostor's "passed"."""
    _plant(fresh, kill_first=True)
    for client in (attach(fresh.handle()), fresh):
        with pytest.raises(ExecServerError):
            client.exec("exit 1", timeout=10)


def test_the_server_cannot_be_debugged_by_the_rollout(fresh: Sandbox) -> None:
    """ptrace (and with it reading or rewriting the server's memory, or taking its socket) of the
    execution server from a rollout command is refused: the server is not dumpable."""
    probe = (
        "import ctypes, os\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        "server = os.getppid()\n"
        "print('ptrace', libc.ptrace(16, server, 0, 0))\n"  # PTRACE_ATTACH
        "try:\n"
        "    print('fds', os.listdir(f'/proc/{server}/fd'))\n"
        "except OSError as exc:\n"
        "    print('fds refused', exc.errno)\n"
    )
    result = fresh.exec(["python3", "-c", probe], timeout=30)  # its parent is the server
    assert "ptrace -1" in result.stdout, result.stdout + result.stderr
    assert "fds refused" in result.stdout, result.stdout + result.stderr
    assert fresh.exec("exit 4", timeout=30).exit_code == 4


def test_teardown_ends_the_impostor(runtime: LocalRuntime) -> None:
    """Teardown does not go through the socket: the impostor is killed with the sandbox."""
    sandbox = runtime.start(SandboxSpec())
    _plant(sandbox)
    pid_dir = Path(f"/proc/{sandbox.info.init_pid}")
    sandbox.stop()
    wait_until(lambda: not pid_dir.exists(), timeout_s=10, what="the sandbox's init is gone")
    assert not Path(sandbox.info.sandbox_dir).exists()
