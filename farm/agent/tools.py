"""What the agent loop needs of a tool: a name, an OpenAI function schema, and a call."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from farm import tracing


class ToolError(Exception):
    """A recoverable tool failure; its message goes back to the policy as the observation."""


@dataclass(frozen=True)
class FunctionTool:
    name: str
    description: str
    parameters: dict[str, Any]
    call: Callable[[dict[str, Any]], str]

    @property
    def schema(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }

    def __call__(self, arguments: dict[str, Any]) -> str:
        missing = [p for p in self.parameters.get("required", []) if p not in arguments]
        with tracing.call_span("tool.call", {"farm.tool.name": self.name}) as record:
            if missing:
                raise ToolError(f"missing required argument(s) for {self.name}: {', '.join(missing)}")
            observation = self.call(arguments)
            record(**{"farm.tool.observation_chars": len(observation)})
            return observation
