"""Scripts for the scripted policy: JSONL entries keyed by a substring of a user message (harnesses put
the instruction in different turns: pi in the first, codex after its own context message), optionally
restricted to conversations that offer certain tools (`"tools": ["Bash"]`), so one task can carry a
script per harness, each in that harness's own tool names.

    {"match": "What is 12 * 7", "steps": [{"tool": "python", "arguments": {"code": "print(12 * 7)"}},
                                          {"say": "The answer is \\boxed{ {{- tool_output -}} }."}],
     "wrong_steps": [...]}

String values are Jinja2 templates with `tool_output` (the latest tool result, stripped) and `question`
(the first user message).
"""

from __future__ import annotations

import importlib.resources
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from jinja2.sandbox import SandboxedEnvironment
from pydantic import BaseModel, Field, model_validator

_jinja = SandboxedEnvironment(autoescape=False, keep_trailing_newline=True)


class Step(BaseModel):
    tool: str | None = None
    arguments: dict[str, Any] = Field(default_factory=dict)
    say: str | None = None
    """Final text; with `tool` too, the text that precedes the call."""
    think: str | None = None
    """Reasoning before the text, as `reasoning_content` (written where the chat template puts it,
    e.g. Qwen3's `<think>` block; templates without reasoning leave it out)."""

    @model_validator(mode="after")
    def _acts(self) -> Step:
        if self.tool is None and self.say is None:
            raise ValueError("a step needs `tool` or `say`")
        return self

    def render(self, variables: dict[str, str]) -> dict[str, Any]:
        """The assistant message this step produces in the given context."""
        message: dict[str, Any] = {"role": "assistant", "content": _fill(self.say or "", variables)}
        if self.think is not None:
            message["reasoning_content"] = _fill(self.think, variables)
        if self.tool is not None:
            call = {"name": self.tool, "arguments": _fill(self.arguments, variables)}
            message["tool_calls"] = [{"type": "function", "function": call}]
        return message


class Script(BaseModel):
    match: str = Field(min_length=1)
    tools: list[str] = Field(default_factory=list)
    """Tool names the conversation must offer for this script to apply (empty: any conversation)."""
    steps: list[Step] = Field(min_length=1)
    wrong_steps: list[Step] = Field(default_factory=list)
    """The failure path; empty means the script always succeeds."""

    @property
    def divergence(self) -> int | None:
        """Index of the first step where the two paths differ (None when they never do)."""
        if not self.wrong_steps:
            return None
        for i, (good, bad) in enumerate(zip(self.steps, self.wrong_steps, strict=False)):
            if good != bad:
                return i
        if len(self.steps) != len(self.wrong_steps):
            return min(len(self.steps), len(self.wrong_steps))
        return None


def _fill(value: Any, variables: dict[str, str]) -> Any:
    if isinstance(value, str):
        return _jinja.from_string(value).render(**variables) if "{" in value else value
    if isinstance(value, dict):
        return {k: _fill(v, variables) for k, v in value.items()}
    if isinstance(value, list):
        return [_fill(v, variables) for v in value]
    return value


def load_scripts(paths: Iterable[Path]) -> list[Script]:
    scripts: list[Script] = []
    for path in paths:
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if not line.strip():
                continue
            try:
                scripts.append(Script.model_validate(json.loads(line)))
            except ValueError as exc:
                raise ValueError(f"{path}:{number}: bad script: {exc}") from exc
    return scripts


def handler_script_paths() -> list[Path]:
    """Every handlers/*/scripts/*.jsonl shipped with the installed `handlers` package (if any)."""
    try:
        root = importlib.resources.files("handlers")
    except ModuleNotFoundError:
        return []
    found: list[Path] = []
    for handler in sorted(root.iterdir(), key=lambda p: p.name):
        scripts_dir = handler / "scripts"
        if handler.is_dir() and scripts_dir.is_dir():
            found += sorted(Path(str(p)) for p in scripts_dir.iterdir() if p.name.endswith(".jsonl"))
    return found


class ScriptBook:
    """Finds the script for a conversation: among scripts whose `match` occurs in one of the user
    messages and whose tools are all offered, the longest match wins, then the most specific tools."""

    def __init__(self, scripts: Iterable[Script]) -> None:
        self.scripts = sorted(scripts, key=lambda s: (len(s.match), len(s.tools)), reverse=True)

    def find(self, user_texts: str | Iterable[str], offered_tools: Iterable[str] = ()) -> Script | None:
        texts = [user_texts] if isinstance(user_texts, str) else list(user_texts)
        offered = set(offered_tools)
        return next(
            (s for s in self.scripts if set(s.tools) <= offered and any(s.match in t for t in texts)), None
        )

    def __len__(self) -> int:
        return len(self.scripts)
