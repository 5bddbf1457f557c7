"""The tool registry: each tool's OpenAI function schema, argument model and how it is served, so a handler
picks a toolset by name (e.g. ["python", "bash", "editor", "think", "finish"]) and dispatches calls.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from containers.results import ToolResult

DEFAULT_TOOL_TIMEOUT_S = 120.0


class Caller(Protocol):
    """What a tool call goes through: the execution server client (ExecClient.call)."""

    def call(self, op: str, args: dict[str, Any] | None = None, timeout: float | None = None) -> Any: ...


class _Args(BaseModel):
    model_config = ConfigDict(extra="forbid")


class BashArgs(_Args):
    command: str = Field(description="The bash command to run. State (cwd, variables) persists across calls.")
    timeout: float | None = Field(default=None, description="Seconds before the command is interrupted.")


class PythonArgs(_Args):
    code: str = Field(description="Python code to run in a persistent IPython kernel; state persists.")
    timeout: float | None = Field(default=None, description="Seconds before execution is interrupted.")


class EditorArgs(_Args):
    command: Literal["view", "create", "str_replace", "insert", "undo_edit"] = Field(
        description="The edit to make."
    )
    path: str = Field(description="Path of the file or directory (absolute, or relative to the workspace).")
    file_text: str | None = Field(default=None, description="`create`: content of the new file.")
    old_str: str | None = Field(default=None, description="`str_replace`: exact text to replace (unique).")
    new_str: str | None = Field(default=None, description="`str_replace`/`insert`: the new text.")
    insert_line: int | None = Field(default=None, description="`insert`: insert after this line (0 = top).")
    view_range: list[int] | None = Field(
        default=None, description="`view`: [start, end] lines, end -1 = EOF."
    )


class ThinkArgs(_Args):
    thought: str = Field(description="Your reasoning. It is logged and changes nothing.")


class FinishArgs(_Args):
    answer: str | None = Field(default=None, description="The final answer or a summary of the work done.")


class Tool(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    description: str
    args: type[_Args]
    op: str | None
    """Execution-server op serving the tool; None for tools answered without the sandbox."""

    def openai_schema(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": _schema(self.args),
            },
        }


def _schema(model: type[BaseModel]) -> dict[str, Any]:
    """The model's JSON schema without pydantic's titles, optional fields as plain (nullable) types."""
    schema = model.model_json_schema()
    properties = {}
    for name, prop in schema.get("properties", {}).items():
        prop = {k: v for k, v in prop.items() if k not in ("title", "default")}
        if "anyOf" in prop:
            choices = [c for c in prop.pop("anyOf") if c.get("type") != "null"]
            prop = {**choices[0], **prop} if len(choices) == 1 else {"anyOf": choices, **prop}
        properties[name] = prop
    return {
        "type": "object",
        "properties": properties,
        "required": schema.get("required", []),
        "additionalProperties": False,
    }


TOOLS: dict[str, Tool] = {
    tool.name: tool
    for tool in (
        Tool(
            name="bash",
            description="Run a command in a persistent bash shell inside the sandbox. Long-running commands "
            "are interrupted at the timeout; very long output is truncated in the middle.",
            args=BashArgs,
            op="bash",
        ),
        Tool(
            name="python",
            description="Execute Python code in a persistent IPython kernel inside the sandbox. Printed "
            "output, the value of the last expression and tracebacks are returned.",
            args=PythonArgs,
            op="ipython",
        ),
        Tool(
            name="editor",
            description="View, create and edit files: `view` a file (with line numbers) or a directory, "
            "`create` a new file, `str_replace` an exact unique snippet, `insert` text after a line, "
            "`undo_edit` the last change to a file.",
            args=EditorArgs,
            op="editor",
        ),
        Tool(
            name="think",
            description="Think step by step before acting. The thought is recorded; nothing else happens.",
            args=ThinkArgs,
            op=None,
        ),
        Tool(
            name="finish",
            description="Finish the task, optionally giving the final answer.",
            args=FinishArgs,
            op=None,
        ),
    )
}
ALIASES = {"ipython": "python", "str_replace_editor": "editor", "execute_bash": "bash"}


def get_tool(name: str) -> Tool:
    tool = TOOLS.get(ALIASES.get(name, name))
    if tool is None:
        raise KeyError(f"unknown tool {name!r}; known: {', '.join(sorted(TOOLS))}")
    return tool


def toolset(names: list[str]) -> list[Tool]:
    return [get_tool(name) for name in names]


def openai_tools(names: list[str]) -> list[dict[str, Any]]:
    """The `tools` list of a chat-completions request for the named toolset."""
    return [tool.openai_schema() for tool in toolset(names)]


def call_tool(
    caller: Caller, name: str, arguments: dict[str, Any], timeout: float = DEFAULT_TOOL_TIMEOUT_S
) -> ToolResult:
    """Validate a model's tool call and run it; bad calls come back as error observations, not exceptions."""
    try:
        tool = get_tool(name)
    except KeyError as exc:
        return ToolResult(output=str(exc.args[0]), error=True)
    try:
        args = tool.args.model_validate(arguments)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'arguments'}: {e['msg']}" for e in exc.errors()
        )
        return ToolResult(output=f"invalid arguments for {tool.name}: {problems}", error=True)
    if isinstance(args, ThinkArgs):
        return ToolResult(output="Your thought has been logged.")
    if isinstance(args, FinishArgs):
        return ToolResult(output=args.answer or "", finished=True)
    payload = args.model_dump(exclude_none=True)
    call_timeout = payload.pop("timeout", None) or timeout
    if tool.op in ("bash", "ipython"):
        payload["timeout"] = call_timeout
    assert tool.op is not None
    result = caller.call(tool.op, payload, timeout=call_timeout)
    return ToolResult(
        output=result["output"],
        error=bool(result.get("error")),
        exit_code=result.get("exit_code"),
        timed_out=bool(result.get("timed_out")),
    )
