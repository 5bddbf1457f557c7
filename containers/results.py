"""What comes back from a sandbox: command results and tool results."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field


class ExecResult(BaseModel):
    model_config = ConfigDict(frozen=True)

    stdout: str
    stderr: str
    exit_code: int
    """The command's exit status; negative when killed by a signal (as subprocess reports it)."""
    timed_out: bool = False
    cancelled: bool = False
    duration_s: float

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out


class ToolResult(BaseModel):
    """The observation a tool call returns to the agent."""

    model_config = ConfigDict(frozen=True)

    output: str
    error: bool = False
    """The call failed (non-zero exit, exception, bad arguments); the output says why."""
    exit_code: int | None = None
    timed_out: bool = False
    finished: bool = False
    """The agent called `finish`."""
    metadata: dict[str, Any] = Field(default_factory=dict)
