"""Read a rendered ChatML prompt back into OpenAI-style messages (the inverse of the shipped template,
and of the ChatML family it belongs to: Qwen's templates list tools in the system turn under their own
header and put tool results in a user turn as `<tool_response>` blocks, one per result).

The reference LLM server gets only token ids; its scripted policy decodes them and uses this to see the
conversation: who said what, which tools exist, and whether an assistant turn is open for generation.
"""

from __future__ import annotations

import json
import re
from typing import Any

from pydantic import BaseModel, Field

from farm.chat.families.hermes import TOOL_RESPONSE_CLOSE, TOOL_RESPONSE_OPEN
from farm.chat.tool_calls import ParsedAssistant, parse_assistant
from farm.chat.tool_parsers import parse_with

IM_START, IM_END = "<|im_start|>", "<|im_end|>"
TOOLS_HEADER = "\n\n# Tools\n\n"


class ParsedConversation(BaseModel):
    messages: list[dict[str, Any]] = Field(default_factory=list)
    tools: list[dict[str, Any]] = Field(default_factory=list)
    open_role: str | None = None
    """Role of a trailing turn that was opened but not closed (the generation prompt), if any."""
    open_text: str = ""
    """What that open turn already holds (e.g. a prefilled answer)."""


def parse_chatml(text: str, parser: str | None = None) -> ParsedConversation:
    """`parser` reads the assistant turns' tool calls (default Hermes; farm/chat/families)."""
    parsed = ParsedConversation()
    for chunk in text.split(IM_START)[1:]:
        role, _, body = chunk.partition("\n")
        closed = IM_END in body
        body = body.partition(IM_END)[0]
        if not closed:
            parsed.open_role, parsed.open_text = role, body
            break
        if role == "user" and (results := _tool_responses(body)) is not None:
            parsed.messages += [{"role": "tool", "content": result} for result in results]
            continue
        parsed.messages.append(_message(role, body, parsed, parser))
    return parsed


def _tool_responses(body: str) -> list[str] | None:
    """The results of a user turn made only of `<tool_response>` blocks (Qwen's tool turn), else None."""
    rest, results = body, []
    while rest.startswith(TOOL_RESPONSE_OPEN):
        inside, found, rest = rest[len(TOOL_RESPONSE_OPEN) :].partition(TOOL_RESPONSE_CLOSE)
        if not found:
            return None
        results.append(inside)
        rest = rest.removeprefix("\n")
    return results if results and not rest else None


def _message(role: str, body: str, parsed: ParsedConversation, parser: str | None) -> dict[str, Any]:
    if role == "system" and not parsed.messages and "<tools>\n" in body:
        parsed.tools = read_tools(body)
        if TOOLS_HEADER in body:
            system = body.partition(TOOLS_HEADER)[0]
        else:  # Qwen: the tools section opens the system turn, after any system text and a blank line
            system = body.partition("# Tools")[0].removesuffix("\n\n")
        return {"role": "system", "content": system}
    if role == "tool":
        if body.startswith(TOOL_RESPONSE_OPEN) and body.endswith(TOOL_RESPONSE_CLOSE):
            body = body[len(TOOL_RESPONSE_OPEN) : -len(TOOL_RESPONSE_CLOSE)]
        return {"role": "tool", "content": body}
    if role == "assistant":
        return _read_answer(body, parser).message()
    return {"role": role, "content": body}


_XML_TOOL = re.compile(r"<function>\n<name>([^<]*)</name>")


def read_tools(section: str) -> list[dict[str, Any]]:
    inside = section.partition("<tools>\n")[2].partition("</tools>")[0]
    if inside.startswith("<function>"):  # Qwen3-Coder lists its tools as XML: the names are what is read
        return [{"type": "function", "function": {"name": name}} for name in _XML_TOOL.findall(inside)]
    tools = []
    for line in inside.splitlines():
        if line.strip():
            try:
                tools.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return tools


def _read_answer(body: str, parser: str | None) -> ParsedAssistant:
    if parser is None or parser == "hermes":
        return parse_assistant(body)
    return parse_with(parser, body, IM_END)
