"""Reading one sampled assistant turn with a tool-call parser (farm/chat/families: the formats, named as
vLLM's and SGLang's `--tool-call-parser` name them), and the rule that a call is never silently an answer.

A parser reads the sampled text of one assistant turn (never a re-render) into text, calls and errors.
After it ran, what is left as text is checked against every other format's signature: text that looks
like a call in a format other than the selected one is an error too ("a `kimi_k2` call, but this farm
reads `hermes`"), so a model whose calls the farm cannot read gets told, the trace records it, and
/metrics counts it.

Which parser runs: the job's `metadata.tool_call_parser`, else its backend's (`add_llm_server`), else
FARM_TOOL_CALL_PARSER, else the guess from the tokenizer's vocabulary and chat template (`detect`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from farm.chat.families import FORMATS
from farm.chat.families.llama import EOM
from farm.chat.tool_calls import ParsedAssistant, split_reasoning

EOM_TOKENS = (EOM,)
"""Tokens that end an assistant turn besides the tokenizer's end-of-turn one."""


def schemas_of(tools: Sequence[Mapping[str, Any]] | None) -> dict[str, Mapping[str, Any]]:
    """Tool name -> parameters schema, from OpenAI-style tool entries."""
    out: dict[str, Mapping[str, Any]] = {}
    for tool in tools or []:
        function = tool.get("function", tool)
        if isinstance(function, Mapping) and isinstance(function.get("name"), str):
            parameters = function.get("parameters")
            out[function["name"]] = parameters if isinstance(parameters, Mapping) else {}
    return out


def foreign_calls(parser: str, text: str) -> list[str]:
    """The formats other than `parser` whose calls `text` looks like it holds."""
    selected = FORMATS[parser].signatures
    return [
        name
        for name, f in FORMATS.items()
        if name != parser and f.signatures != selected and f.attempted(text)
    ]


_JSON_LIKE = ("llama3_json", "pythonic")


def parse_with(
    parser: str,
    text: str,
    eot: str,
    tools: Sequence[Mapping[str, Any]] | None = None,
    end_tokens: Sequence[str] = (),
) -> ParsedAssistant:
    """One sampled assistant turn (with or without its end-of-turn text) read by `parser`."""
    for end in (eot, *end_tokens):
        if end and text.endswith(end):
            text = text[: -len(end)]
            break
    reasoning, text = split_reasoning(text)
    content, calls, errors = FORMATS[parser].split(text, schemas_of(tools))
    others = foreign_calls(parser, content)
    if errors:  # a call the parser could not read may be one of another format (not the JSON-like ones,
        # which a well-formed call of many formats contains)
        others += [o for o in foreign_calls(parser, text) if o not in others and o not in _JSON_LIKE]
    for other in others:
        errors.append(
            f"this looks like a `{other}` tool call, but the farm reads `{parser}` calls "
            f"(select the parser with tool_call_parser)"
        )
    return ParsedAssistant(content=content.strip(), tool_calls=calls, errors=errors, reasoning=reasoning)
