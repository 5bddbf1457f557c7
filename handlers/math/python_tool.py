"""The `python` tool of the math handler: runs code in a fresh interpreter in the job's workspace.

A plain subprocess for now; sandboxed execution (bubblewrap, IPython kernel) replaces it with the
containers/ runtime.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

from farm.agent.tools import FunctionTool, ToolError

PARAMETERS = {
    "type": "object",
    "properties": {"code": {"type": "string", "description": "Python source; print what you need to see."}},
    "required": ["code"],
}


def python_tool(workdir: Path, timeout_s: float = 10.0) -> FunctionTool:
    def run(arguments: dict) -> str:
        code = arguments["code"]
        if not isinstance(code, str):
            raise ToolError("`code` must be a string")
        proc = subprocess.Popen(
            [sys.executable, "-I", "-c", code],
            cwd=workdir,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(workdir)},
        )
        try:
            out, _ = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            out, _ = proc.communicate()
            return (out or "") + f"\n[timed out after {timeout_s:g} s]"
        if proc.returncode != 0:
            return (out or "") + f"\n[exit code {proc.returncode}]"
        return out.strip() if out.strip() else "[no output]"

    return FunctionTool(
        name="python",
        description="Run Python 3 code and return what it prints (stdout and stderr).",
        parameters=PARAMETERS,
        call=run,
    )
