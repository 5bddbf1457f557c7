"""The `exec` flavour of the math handler's `python` tool: a fresh interpreter in the job's sandbox
per call. (The default flavour is the sandbox's persistent IPython kernel.)"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from farm.agent.tools import FunctionTool, ToolError

if TYPE_CHECKING:
    from containers import Sandbox

PARAMETERS = {
    "type": "object",
    "properties": {"code": {"type": "string", "description": "Python source; print what you need to see."}},
    "required": ["code"],
}


def exec_python_tool(sandbox: Sandbox, timeout_s: float) -> FunctionTool:
    def run(arguments: dict[str, Any]) -> str:
        code = arguments["code"]
        if not isinstance(code, str):
            raise ToolError("`code` must be a string")
        result = sandbox.exec(["python3", "-I", "-c", code], timeout=timeout_s)
        out = (result.stdout + result.stderr).strip()
        if result.timed_out:
            return out + f"\n[timed out after {timeout_s:g} s]"
        if result.exit_code != 0:
            return out + f"\n[exit code {result.exit_code}]"
        return out or "[no output]"

    return FunctionTool(
        name="python",
        description="Run Python 3 code in a fresh interpreter and return what it prints.",
        parameters=PARAMETERS,
        call=run,
    )
