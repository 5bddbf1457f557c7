"""Tool declarations (OpenAI's `tools` format) the chat-template and conversation tests render."""

from __future__ import annotations

from typing import Any

PYTHON_TOOLS: list[dict[str, Any]] = [
    {
        "type": "function",
        "function": {
            "name": "python",
            "description": "Run Python code",
            "parameters": {"type": "object", "properties": {"code": {"type": "string"}}},
        },
    }
]
"""A `python` tool taking its code as `code`."""
