"""The model families the farm reads, one module each (farm/chat/families/<family>.py declares a
`FAMILY`: its markers, its tool-call formats with their splitters, names, call syntax and example), and
what is derived from them: detection from a tokenizer's vocabulary and chat template, the parser
registry under vLLM's and SGLang's names, and docs/FAMILIES.md (ops/families_doc.py).

Adding a family: a module here declaring its `FAMILY`, its place in `FAMILIES`, a conformance test
(tests/model_side/test_tool_parsers.py) and its published template under farm/chat/assets/templates.
The reference LLM reads its prompts only if farm/llm/prompts.py learns its layout.

Every family's answer may open with a `<think>` block (Qwen3, DeepSeek-R1, Magistral), parsed into
`reasoning` the same way (farm/chat/tool_calls.py split_reasoning).
"""

from __future__ import annotations

from collections.abc import Callable

from farm.chat.families import deepseek, gemma, glm, hermes, kimi, llama, mistral
from farm.chat.families.record import ModelFamily, ToolCallFormat

FAMILIES: tuple[ModelFamily, ...] = (
    hermes.FAMILY,
    llama.FAMILY,
    mistral.FAMILY,
    deepseek.FAMILY,
    glm.FAMILY,
    kimi.FAMILY,
    gemma.FAMILY,
)
"""In detection order: the first whose marker is one token of a vocabulary is its family; the one with
no markers (hermes) takes every vocabulary none of the others' marks."""
DEFAULT = next(f for f in FAMILIES if not f.markers)
FORMATS: dict[str, ToolCallFormat] = {f.name: f for family in FAMILIES for f in family.formats}
"""The tool-call parsers by vLLM's name."""
PARSER_NAMES: tuple[str, ...] = tuple(FORMATS)
ALIASES: dict[str, str] = {alias: f.name for f in FORMATS.values() for alias in f.aliases}


def family_named(name: str) -> ModelFamily:
    return next(f for f in FAMILIES if f.name == name)


def detect(
    is_single_token: Callable[[str], bool], template: str | None = None
) -> tuple[ModelFamily, ToolCallFormat]:
    """A vocabulary's family (the first whose marker is one of its tokens, `is_single_token(text)`) and
    the tool-call format its vocabulary and chat template imply, which a job, its backend or
    FARM_TOOL_CALL_PARSER may override."""
    marked = (f for f in FAMILIES if any(is_single_token(marker) for marker in f.markers))
    family = next(marked, DEFAULT)
    return family, family.format_for(is_single_token, template or "")


def resolve_parser(name: str) -> str:
    """The canonical name of a parser the user named (vLLM's or SGLang's word); ValueError otherwise."""
    key = name.strip().lower()
    key = ALIASES.get(key, key)
    if key not in FORMATS:
        raise ValueError(f"unknown tool-call parser {name!r}; choose one of {', '.join(PARSER_NAMES)}")
    return key
