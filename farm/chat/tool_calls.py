"""Hermes-style tool calls in assistant text:
`<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`.

Parsing never raises: every block that cannot become a call yields one message in `errors`, which the
agent loop turns into corrective feedback for the model (a bad call is data, not a crash).
"""

from __future__ import annotations

import json
import re
import uuid
from typing import Any

from pydantic import BaseModel, Field

TOOL_CALL_OPEN, TOOL_CALL_CLOSE = "<tool_call>", "</tool_call>"
THINK_OPEN, THINK_CLOSE = "<think>", "</think>"
DEFAULT_EOT = "<|im_end|>"

_BLOCK = re.compile(re.escape(TOOL_CALL_OPEN) + r"(.*?)" + re.escape(TOOL_CALL_CLOSE), re.DOTALL)


class ToolCall(BaseModel):
    id: str = Field(default_factory=lambda: f"call_{uuid.uuid4().hex[:24]}")
    name: str
    arguments: dict[str, Any] = Field(default_factory=dict)

    def to_openai(self) -> dict[str, Any]:
        """The OpenAI chat `tool_calls` entry; arguments as a JSON string, as the template renders them."""
        return {
            "id": self.id,
            "type": "function",
            "function": {"name": self.name, "arguments": json.dumps(self.arguments, ensure_ascii=False)},
        }


class ParsedAssistant(BaseModel):
    content: str
    """Text outside tool-call and think blocks, stripped."""
    tool_calls: list[ToolCall] = Field(default_factory=list)
    errors: list[str] = Field(default_factory=list)
    """One message per block that could not become a call."""
    reasoning: str | None = None
    """Text inside `<think>...</think>`, if the answer had such a block."""

    def message(self) -> dict[str, Any]:
        """The OpenAI chat assistant message this answer reads as (what a prompt parser gives back)."""
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = [call.to_openai() for call in self.tool_calls]
        if self.reasoning is not None:
            message["reasoning_content"] = self.reasoning
        return message


def format_tool_call(name: str, arguments: dict[str, Any]) -> str:
    """One call exactly as the shipped chat template renders it (so re-rendering reproduces the text)."""
    payload = json.dumps({"name": name, "arguments": arguments}, ensure_ascii=False)
    return f"{TOOL_CALL_OPEN}\n{payload}\n{TOOL_CALL_CLOSE}"


def parse_assistant(text: str, eot: str = DEFAULT_EOT) -> ParsedAssistant:
    if eot and text.endswith(eot):
        text = text[: -len(eot)]
    reasoning, text = split_reasoning(text)
    content, calls, errors = split_hermes(text)
    return ParsedAssistant(content=content.strip(), tool_calls=calls, errors=errors, reasoning=reasoning)


def split_hermes(text: str) -> tuple[str, list[ToolCall], list[str]]:
    """(text outside the `<tool_call>` blocks, the calls, one error per block that is not a call)."""
    calls: list[ToolCall] = []
    errors: list[str] = []
    outside: list[str] = []
    cursor = 0
    for number, match in enumerate(_BLOCK.finditer(text), start=1):
        outside.append(text[cursor : match.start()])
        cursor = match.end()
        call = _parse_block(match.group(1), number, errors)
        if call is not None:
            calls.append(call)
    rest = text[cursor:]
    if TOOL_CALL_OPEN in rest:
        head, _, tail = rest.partition(TOOL_CALL_OPEN)
        outside.append(head)
        errors.append(
            f"tool call {len(calls) + len(errors) + 1}: unclosed {TOOL_CALL_OPEN} tag "
            f"(no {TOOL_CALL_CLOSE} after {tail.strip()[:80]!r})"
        )
    else:
        outside.append(rest)
    content = "".join(outside)
    if TOOL_CALL_CLOSE in content:
        errors.append(f"stray {TOOL_CALL_CLOSE} without a matching {TOOL_CALL_OPEN}")
        content = content.replace(TOOL_CALL_CLOSE, "")
    return content, calls, errors


def split_reasoning(text: str) -> tuple[str | None, str]:
    if THINK_CLOSE in text:
        before, _, after = text.partition(THINK_CLOSE)
        # A template may open the think block in the prompt, so the answer can start inside it.
        head, sep, inner = before.partition(THINK_OPEN)
        reasoning = inner if sep else head
        prefix = head if sep else ""
        return reasoning.strip(), prefix + after
    if THINK_OPEN in text:
        head, _, inner = text.partition(THINK_OPEN)
        return inner.strip(), head  # cut off while thinking
    return None, text


def _parse_block(body: str, number: int, errors: list[str]) -> ToolCall | None:
    where = f"tool call {number}"
    try:
        payload = json.loads(body)
    except json.JSONDecodeError as exc:
        errors.append(f"{where}: invalid JSON ({exc.msg} at line {exc.lineno} column {exc.colno})")
        return None
    if not isinstance(payload, dict):
        errors.append(
            f"{where}: expected a JSON object with `name` and `arguments`, got {type(payload).__name__}"
        )
        return None
    name = payload.get("name")
    if not isinstance(name, str) or not name:
        errors.append(f"{where}: missing function `name`")
        return None
    return call_from(name, payload.get("arguments", {}), where, errors)


def call_from(
    name: str, arguments: Any, where: str, errors: list[str], field: str = "arguments"
) -> ToolCall | None:
    """A call from its name and its arguments, given as an object or (some models double-encode them) as
    a string that holds one; None with the reason in `errors`, prefixed by `where` ("tool call 2")."""
    decoded = json_arguments(arguments, f"{where} ({name})", errors, field)
    return None if decoded is None else ToolCall(name=name, arguments=decoded)


def json_arguments(
    raw: Any, where: str, errors: list[str], field: str = "arguments"
) -> dict[str, Any] | None:
    """A call's arguments as a JSON object (given as one, or as its JSON text); None with the reason in
    `errors`, prefixed by `where` (e.g. "tool call 2 (search)")."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as exc:
            errors.append(f"{where}: `{field}` is not JSON ({exc.msg})")
            return None
    if not isinstance(raw, dict):
        errors.append(f"{where}: `{field}` must be a JSON object, got {type(raw).__name__}")
        return None
    return raw
