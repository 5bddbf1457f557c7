"""Provider tool types that are not plain function declarations: what each becomes for the chat template.

Every tool a client sends is either carried to the model as a function tool (a hosted tool the backend
cannot run, such as web search, becomes a function the model may call; the harness then sees an ordinary
call of that name and answers it, typically "unsupported") or refused with a 400 naming the tool. Nothing is
dropped. The per-provider tables live in each translator; the decision table is in docs/CONTRACT.md.
"""

from __future__ import annotations

from typing import Any

from farm.gateway.providers.base import RequestError


def _string(description: str) -> dict[str, Any]:
    return {"type": "string", "description": description}


def _object(properties: dict[str, Any], required: list[str]) -> dict[str, Any]:
    return {"type": "object", "properties": properties, "required": required}


CUSTOM_INPUT = _object({"input": _string("The raw tool input.")}, ["input"])
QUERY = _object({"query": _string("What to search for.")}, ["query"])
CODE = _object({"code": _string("The code to run.")}, ["code"])
URL = _object({"url": _string("The URL to fetch.")}, ["url"])
PROMPT = _object({"prompt": _string("What the image should show.")}, ["prompt"])
BASH = _object(
    {
        "command": _string("The shell command to run."),
        "restart": {"type": "boolean", "description": "Restart the shell session instead."},
    },
    [],
)
_FILE_COMMAND = {
    "path": _string("Absolute path of the file or directory."),
    "file_text": _string("Content of the file to create."),
    "old_str": _string("Exact text to replace."),
    "new_str": _string("Replacement text."),
    "insert_line": {"type": "integer", "description": "Line after which to insert."},
    "insert_text": _string("Text to insert."),
    "view_range": {"type": "array", "items": {"type": "integer"}, "description": "[start, end] lines."},
}
TEXT_EDITOR = _object(
    {
        "command": {"type": "string", "enum": ["view", "create", "str_replace", "insert", "undo_edit"]},
        **_FILE_COMMAND,
    },
    ["command", "path"],
)
MEMORY = _object(
    {
        "command": {
            "type": "string",
            "enum": ["view", "create", "str_replace", "insert", "delete", "rename"],
        },
        **_FILE_COMMAND,
        "old_path": _string("Path to rename from."),
        "new_path": _string("Path to rename to."),
    },
    ["command"],
)
LOCAL_SHELL = _object(
    {
        "command": {"type": "array", "items": {"type": "string"}, "description": "argv to execute."},
        "workdir": _string("Working directory."),
        "timeout_ms": {"type": "integer", "description": "Time limit in milliseconds."},
    },
    ["command"],
)
SHELL = _object(
    {
        "commands": {"type": "array", "items": {"type": "string"}, "description": "Commands to run."},
        "timeout_ms": {"type": "integer", "description": "Time limit in milliseconds."},
        "max_output_length": {"type": "integer", "description": "Characters of output to keep."},
    },
    ["commands"],
)
APPLY_PATCH = _object(
    {
        "type": {"type": "string", "enum": ["create_file", "update_file", "delete_file"]},
        "path": _string("Path of the file."),
        "diff": _string("The V4A diff for create_file and update_file."),
    },
    ["type", "path"],
)


def function_tool(name: str, description: str, parameters: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {"name": name, "description": description, "parameters": parameters},
    }


def refuse(where: str, kind: str, reason: str) -> RequestError:
    """The client's request names a tool this gateway cannot carry: a 400 in the provider's error shape."""
    return RequestError(f"{where}: tool type {kind!r} is not supported by this gateway ({reason})")


NEEDS_SCREENSHOTS = "computer use exchanges screenshots, which a text chat backend cannot take"
REMOTE_MCP = "the tool list lives on a remote MCP server the gateway does not connect to"
UNKNOWN = "unknown tool type; send it as a function tool"
