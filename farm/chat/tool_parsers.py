"""The tool-call parsers, named as vLLM's and SGLang's `--tool-call-parser` name them, and the rule that a
call is never silently an answer.

A parser reads the sampled text of one assistant turn (never a re-render) into text, calls and errors
(formats: farm/chat/tool_calls.py, family_tool_calls.py, formats_more.py). After it ran, what is left as
text is checked against every other format's signature: text that looks like a call in a format other
than the selected one is an error too ("a `kimi_k2` call, but this farm reads `hermes`"), so a model
whose calls the farm cannot read gets told, the trace records it, and /metrics counts it.

Which parser runs: the job's `metadata.tool_call_parser`, else its backend's (`add_llm_server`), else
FARM_TOOL_CALL_PARSER, else the guess from the tokenizer's vocabulary and chat template (`guess_parser`).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from farm.chat import formats_more as more
from farm.chat.family_tool_calls import MISTRAL_CALLS, parse_deepseek, parse_mistral
from farm.chat.tool_calls import ParsedAssistant, split_hermes, split_reasoning

Splitter = Callable[[str, more.Schemas], more.Split]


@dataclass(frozen=True)
class ToolCallFormat:
    name: str
    split: Splitter
    signature: re.Pattern[str]
    """Text that shows a call in this format was attempted."""
    hint: str
    """How one call looks, for the feedback on a call that could not be read."""


def _ds_v3(text: str, _: more.Schemas) -> more.Split:
    return parse_deepseek(text)


_LLAMA_JSON = r'\{\s*"name"\s*:\s*"[^"]*"\s*,\s*"(?:parameters|arguments)"\s*:'
_PYTHONIC = r"(?m)^\s*\[\s*[A-Za-z_][\w.]*\((?:\s*\)|\s*[A-Za-z_]\w*\s*=)"
_DS = re.compile(re.escape(more.DS_BEGIN) + "|" + re.escape(more.DS_CALL))
FORMATS: dict[str, ToolCallFormat] = {
    f.name: f
    for f in (
        ToolCallFormat(
            "hermes",
            lambda text, _: split_hermes(text),
            re.compile(r"<tool_call>\s*\{"),
            '<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>',
        ),
        ToolCallFormat(
            "qwen3_coder",
            more.split_qwen3_coder,
            re.compile(r"<function=[^>\n]*>"),
            "<tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n</function>\n</tool_call>",
        ),
        ToolCallFormat(
            "llama3_json",
            more.split_llama3_json,
            re.compile(
                r'\{\s*"name"\s*:\s*"[^"]*"\s*,\s*"(?:parameters|arguments)"\s*:|'
                + re.escape(more.PYTHON_TAG)
            ),
            '{"name": ..., "parameters": {...}}',
        ),
        ToolCallFormat(
            "pythonic",
            more.split_pythonic,
            re.compile(
                r"(?m)^\s*\[\s*[A-Za-z_][\w.]*\((?:\s*\)|\s*[A-Za-z_]\w*\s*=)|" + re.escape(more.PYTHON_START)
            ),
            "[name(key=value, ...)]",
        ),
        ToolCallFormat(
            "mistral",
            lambda text, _: parse_mistral(text),
            re.compile(re.escape(MISTRAL_CALLS)),
            '[TOOL_CALLS][{"name": ..., "arguments": {...}}]',
        ),
        ToolCallFormat(
            "deepseek_v3",
            _ds_v3,
            _DS,
            f"{more.DS_BEGIN}{more.DS_CALL}function{more.DS_SEP}NAME\n```json\n{{...}}\n```{more.DS_CALL_END}{more.DS_END}",
        ),
        ToolCallFormat(
            "deepseek_v31",
            more.split_deepseek_v31,
            _DS,
            f"{more.DS_BEGIN}{more.DS_CALL}NAME{more.DS_SEP}{{...}}{more.DS_CALL_END}{more.DS_END}",
        ),
        ToolCallFormat(
            "glm45",
            more.split_glm45,
            re.compile(r"<tool_call>\s*[A-Za-z_][\w.\-]*\s*(?:\n|<arg_key>)|<arg_key>"),
            "<tool_call>NAME\n<arg_key>KEY</arg_key>\n<arg_value>VALUE</arg_value>\n</tool_call>",
        ),
        ToolCallFormat(
            "kimi_k2",
            more.split_kimi_k2,
            re.compile(re.escape(more.KIMI_SECTION[0]) + "|" + re.escape(more.KIMI_CALL)),
            f"{more.KIMI_SECTION[0]}{more.KIMI_CALL}functions.NAME:0{more.KIMI_ARGS}{{...}}{more.KIMI_END}"
            f"{more.KIMI_SECTION[1]}",
        ),
    )
}
PARSER_NAMES: tuple[str, ...] = tuple(FORMATS)
EOM_TOKENS = (more.EOM,)
"""Tokens that end an assistant turn besides the tokenizer's end-of-turn one."""

ALIASES: dict[str, str] = {
    # SGLang's names for the same formats (python/sglang/srt/function_call/function_call_parser.py)
    "qwen": "hermes",
    "qwen25": "hermes",
    "qwen3": "hermes",
    "llama3": "llama3_json",
    "llama4_json": "llama3_json",
    "llama4_pythonic": "pythonic",
    "deepseekv3": "deepseek_v3",
    "deepseek_r1": "deepseek_v3",
    "deepseekv31": "deepseek_v31",
    "glm": "glm45",
    "glm4_moe": "glm45",
    "glm46": "glm45",
    "kimik2": "kimi_k2",
    "qwen3coder": "qwen3_coder",
}


def resolve_parser(name: str) -> str:
    """The canonical name of a parser the user named (vLLM's or SGLang's word); ValueError otherwise."""
    key = name.strip().lower()
    key = ALIASES.get(key, key)
    if key not in FORMATS:
        raise ValueError(f"unknown tool-call parser {name!r}; choose one of {', '.join(PARSER_NAMES)}")
    return key


_VOCABULARY_MARKERS: tuple[tuple[str, str], ...] = (
    (MISTRAL_CALLS, "mistral"),
    (more.DS_BEGIN, "deepseek_v3"),
    (more.KIMI_SECTION[0], "kimi_k2"),
    ("<arg_key>", "glm45"),
    (more.PYTHON_START, "pythonic"),
    (more.PYTHON_TAG, "llama3_json"),
    ("<start_of_turn>", "pythonic"),
)
"""A special token only that family's vocabulary has, checked in order. Gemma 3 (`<start_of_turn>`) has
no tool-call token: vLLM reads its calls with `pythonic` (examples/tool_chat_template_gemma3_pythonic.jinja
prompts for them)."""


def guess_parser(is_single_token: Callable[[str], bool], template: str | None = None) -> str:
    """The parser a tokenizer's model most likely needs: from its vocabulary's special tokens, refined
    by its chat template where one vocabulary serves two formats (Qwen3 / Qwen3-Coder, DeepSeek V3 /
    V3.1)."""
    template = template or ""
    for marker, name in _VOCABULARY_MARKERS:
        if is_single_token(marker):
            if name == "deepseek_v3" and more.DS_SEP in template and "function" + more.DS_SEP not in template:
                return "deepseek_v31"
            return name
    if "<function=" in template and "<parameter=" in template:
        return "qwen3_coder"
    if "<arg_key>" in template:
        return "glm45"
    return "hermes"


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
    selected = FORMATS[parser].signature.pattern
    return [
        name
        for name, f in FORMATS.items()
        if name != parser and f.signature.pattern != selected and f.signature.search(text)
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
