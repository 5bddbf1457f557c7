"""Tool backends served by the execution server, called the way a handler calls them."""

from __future__ import annotations

from containers.sandbox import Sandbox


def test_bash_keeps_cwd_and_exports_across_calls(sandbox: Sandbox) -> None:
    assert sandbox.tool("bash", command="mkdir -p /tmp/w && cd /tmp/w && export K=v").exit_code == 0
    result = sandbox.tool("bash", command="pwd; echo $K")
    assert result.output == "/tmp/w\nv\n" and not result.error


def test_bash_exit_codes_and_multiline_scripts(sandbox: Sandbox) -> None:
    failed = sandbox.tool("bash", command="ls /nonexistent")
    assert failed.error and failed.exit_code == 2 and "No such file" in failed.output
    script = "for i in 1 2 3; do\n  echo line $i\ndone\ncat <<'EOF'\nquoted 'text' \\n $HOME\nEOF"
    assert sandbox.tool("bash", command=script).output == "line 1\nline 2\nline 3\nquoted 'text' \\n $HOME\n"


def test_bash_long_command_and_truncated_output(sandbox: Sandbox) -> None:
    payload = "x" * 20000
    assert sandbox.tool("bash", command=f"echo {payload} | wc -c").output.strip() == "20001"
    big = sandbox.tool("bash", command="seq 1 200000")
    assert "output truncated" in big.output and big.output.rstrip().endswith("200000")


def test_bash_timeout_interrupts_and_keeps_the_shell(sandbox: Sandbox) -> None:
    sandbox.tool("bash", command="export KEEP=1")
    result = sandbox.tool("bash", command="sleep 30", timeout=0.5)
    assert result.timed_out and "timed out" in result.output
    assert sandbox.tool("bash", command="echo $KEEP").output == "1\n", result


def test_python_tool_keeps_state_and_returns_tracebacks(sandbox: Sandbox) -> None:
    assert sandbox.tool("python", code="import math\nx = math.factorial(5)").output == ""
    assert sandbox.tool("python", code="print(x)\nx + 1").output == "120\n121\n"
    failed = sandbox.tool("python", code="def f():\n    return 1 / 0\nf()")
    assert failed.error and "ZeroDivisionError" in failed.output and "\x1b[" not in failed.output


def test_python_tool_timeout_interrupts_and_state_survives(sandbox: Sandbox) -> None:
    sandbox.tool("python", code="kept = 42")
    result = sandbox.tool("python", code="import time\ntime.sleep(30)", timeout=1)
    assert result.timed_out and "KeyboardInterrupt" in result.output
    assert sandbox.tool("python", code="kept").output == "42\n"


def test_editor_round_trip(sandbox: Sandbox) -> None:
    created = sandbox.tool("editor", command="create", path="notes/a.py", file_text="a = 1\nb = 2\n")
    assert created.error  # parent directory missing
    sandbox.exec("mkdir -p notes")
    assert not sandbox.tool("editor", command="create", path="notes/a.py", file_text="a = 1\nb = 2\n").error
    assert not sandbox.tool(
        "editor", command="str_replace", path="notes/a.py", old_str="b = 2", new_str="b = 3"
    ).error
    assert not sandbox.tool(
        "editor", command="insert", path="/workspace/notes/a.py", insert_line=0, new_str="#!"
    ).error
    assert sandbox.exec("cat notes/a.py").stdout == "#!\na = 1\nb = 3\n"
    assert not sandbox.tool("editor", command="undo_edit", path="notes/a.py").error
    assert sandbox.exec("cat notes/a.py").stdout == "a = 1\nb = 3\n"
    view = sandbox.tool("editor", command="view", path="notes/a.py", view_range=[2, 2])
    assert view.output.endswith("     2\tb = 3\n")


def test_bad_tool_calls_become_error_observations(sandbox: Sandbox) -> None:
    assert sandbox.tool("nope").error
    missing = sandbox.tool("bash")
    assert missing.error and "command" in missing.output
    assert sandbox.tool("editor", command="explode", path="x").error
    assert sandbox.tool("think", thought="plan").output == "Your thought has been logged."
    finished = sandbox.tool("finish", answer="42")
    assert finished.finished and finished.output == "42"
