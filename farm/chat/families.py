"""Tool-call families: which format a tokenizer's model writes its tool calls in, detected from the
tokenizer's vocabulary, and the parser for that format.

- `hermes`: Qwen / Hermes `<tool_call>{json}</tool_call>` (farm/chat/tool_calls.py; the shipped tokenizer);
- `mistral`: `[TOOL_CALLS]` (farm/chat/family_tool_calls.py parse_mistral);
- `deepseek`: `<|tool_calls_begin|>...`, full-width (farm/chat/family_tool_calls.py parse_deepseek);
- `llama`, `kimi`, `glm`: Llama 3's header turns, Kimi K2's and GLM-4.5's role tokens, read by the
  parsers named in `PARSER_OF` (farm/chat/tool_parsers.py);
- `gemma`: Gemma 3's `<start_of_turn>ROLE ... <end_of_turn>` turns; its published template has no tool
  role and renders no tool calls, and the calls are the `pythonic` list vLLM reads for Gemma 3
  (`[name(key=value)]`, prompted by vLLM's examples/tool_chat_template_gemma3_pythonic.jinja).

Every family's answer may open with a `<think>` block (Qwen3, DeepSeek-R1, Magistral), parsed into
`reasoning` the same way.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from farm.chat.family_tool_calls import DS_BEGIN, MISTRAL_CALLS, parse_deepseek, parse_mistral
from farm.chat.tool_calls import (
    TOOL_CALL_OPEN,
    ParsedAssistant,
    ToolCall,
    parse_assistant,
    split_reasoning,
)

Family = Literal["hermes", "mistral", "deepseek", "llama", "kimi", "glm", "gemma"]
"""The prompt layout (farm/chat/prompts.py): ChatML, Mistral's, DeepSeek's, Llama 3's header turns, Kimi's,
GLM-4.5's role tokens, Gemma's turns."""
FAMILIES: tuple[Family, ...] = ("hermes", "mistral", "deepseek", "llama", "kimi", "glm", "gemma")

CALL_MARKERS: dict[Family, str] = {
    "hermes": TOOL_CALL_OPEN,
    "mistral": MISTRAL_CALLS,
    "deepseek": DS_BEGIN,
    "glm": TOOL_CALL_OPEN,
}
"""The text that opens a family's tool calls, a single token of the family's vocabulary."""
_MARKERS: tuple[tuple[str, Family], ...] = (
    (MISTRAL_CALLS, "mistral"),
    (DS_BEGIN, "deepseek"),
    ("<|start_header_id|>", "llama"),
    ("<|im_middle|>", "kimi"),
    ("<|observation|>", "glm"),
    ("<start_of_turn>", "gemma"),
)
"""A special token only that family's vocabulary has, checked in order; none of them means hermes."""

_Splitter = Callable[[str], tuple[str, list[ToolCall], list[str]]]
_SPLITTERS: dict[Family, _Splitter] = {"mistral": parse_mistral, "deepseek": parse_deepseek}


def detect_family(is_single_token: Callable[[str], bool]) -> Family:
    """The family whose tool-call marker is one token of the vocabulary (`is_single_token(text)`)."""
    for marker, family in _MARKERS:
        if is_single_token(marker):
            return family
    return "hermes"


PARSER_OF: dict[Family, str] = {
    "hermes": "hermes",
    "mistral": "mistral",
    "deepseek": "deepseek_v3",
    "llama": "llama3_json",
    "kimi": "kimi_k2",
    "glm": "glm45",
    "gemma": "pythonic",
}
"""The tool-call parser a family's vocabulary implies when nothing else says (farm/chat/tool_parsers.py)."""


def parse_family(family: Family, text: str, eot: str) -> ParsedAssistant:
    """Parse one sampled assistant turn (with or without its end-of-turn text `eot`) in `family`'s format."""
    if family not in _SPLITTERS and family != "hermes":
        from farm.chat.tool_parsers import parse_with  # tool_parsers imports this module's neighbours

        return parse_with(PARSER_OF[family], text, eot)
    if family == "hermes":
        return parse_assistant(text, eot)
    if eot and text.endswith(eot):
        text = text[: -len(eot)]
    reasoning, text = split_reasoning(text)
    content, calls, errors = _SPLITTERS[family](text)
    return ParsedAssistant(content=content.strip(), tool_calls=calls, errors=errors, reasoning=reasoning)
