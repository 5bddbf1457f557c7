"""Sandbox tools (containers/tools) as tools of the agent loop: the registry's OpenAI schemas,
calls served by the sandbox's execution server, results rendered as observations."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from containers.tools.registry import openai_tools
from farm.agent.tools import FunctionTool

if TYPE_CHECKING:
    from containers import Sandbox, ToolResult


def observation(result: ToolResult) -> str:
    text = result.output if result.output.strip() else "[no output]"
    if result.timed_out:
        text += "\n[timed out; the command was interrupted]"
    elif result.exit_code not in (None, 0):
        text += f"\n[exit code {result.exit_code}]"
    return f"Error: {text}" if result.error and not result.timed_out else text


def sandbox_tools(sandbox: Sandbox, names: list[str], timeout_s: float) -> list[FunctionTool]:
    tools = []
    for schema in openai_tools(names):
        function = schema["function"]

        def call(arguments: dict[str, Any], name: str = function["name"]) -> str:
            return observation(sandbox.tool(name, timeout=timeout_s, **arguments))

        tools.append(FunctionTool(function["name"], function["description"], function["parameters"], call))
    return tools
