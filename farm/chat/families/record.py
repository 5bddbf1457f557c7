"""What one model family declares: the prompt layout it is named after, the special tokens that identify
its vocabulary, and the tool-call formats its models write, each with the names vLLM and SGLang give its
parser. The registry (farm/chat/families/__init__.py) derives detection, the parser table and
docs/FAMILIES.md from these records."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from farm.chat.tool_calls import ToolCall

Schemas = Mapping[str, Mapping[str, Any]]
"""Tool name -> its parameters' JSON schema (what typed formats convert argument text by)."""
Split = tuple[str, list[ToolCall], list[str]]
"""(text outside the calls, the calls, one error per block that could not become a call)."""
Splitter = Callable[[str, Schemas], Split]


@dataclass(frozen=True)
class ToolCallFormat:
    """One tool-call format, named as vLLM's `--tool-call-parser` names its parser."""

    name: str
    split: Splitter
    """Reads the sampled text of one assistant turn (after its reasoning) into text, calls and errors;
    never raises."""
    signatures: tuple[re.Pattern[str], ...]
    """Text that shows a call in this format was attempted (any of them). One pattern per alternative,
    each starting with a literal where it can: the regex engine scans for a literal fast, and these run on
    every reply the gateway records."""
    hint: str
    """How one call looks, for the feedback on a call that could not be read."""
    example: str
    """One call to `python(code="print(1)")` as a model writes it; docs/FAMILIES.md shows it and a test
    reads it back."""
    models: str
    """Whose models write it."""
    aliases: tuple[str, ...] = ()
    """SGLang's (and older vLLM) names of the same parser."""
    template: str | None = None
    """A published chat template that writes calls in this format, under farm/chat/assets (a test
    checks detection picks this format for it)."""
    vocabulary_has: str | None = None
    """For a format that shares its family's vocabulary with another: a special token that picks it
    (Llama 4's `<|python_start|>`),"""
    template_has: tuple[str, ...] = ()
    """or texts its chat template writes (Qwen3-Coder's `<function=` and `<parameter=`),"""
    template_lacks: tuple[str, ...] = ()
    """and texts it does not (DeepSeek V3.1 writes `<|tool_sep|>`, but not `function<|tool_sep|>`)."""

    def attempted(self, text: str) -> bool:
        return any(pattern.search(text) for pattern in self.signatures)

    def picked_by(self, is_single_token: Callable[[str], bool], template: str) -> bool:
        if self.vocabulary_has is not None and is_single_token(self.vocabulary_has):
            return True
        return (
            bool(self.template_has)
            and all(t in template for t in self.template_has)
            and not any(t in template for t in self.template_lacks)
        )


@dataclass(frozen=True)
class ModelFamily:
    """A prompt layout and the tool-call formats of the models that use it."""

    name: str
    layout: str
    """Whose chat template the layout is, as a reader knows it."""
    markers: tuple[str, ...]
    """Special tokens only this family's vocabulary has (any one, as a single token, identifies it);
    empty for the family a vocabulary with none of the others' markers is read as."""
    formats: tuple[ToolCallFormat, ...]
    """Its tool-call formats, the one its vocabulary implies first."""
    call_marker: str | None = None
    """The text that opens the family's tool calls, when it is a single token of its vocabulary."""

    def format_for(self, is_single_token: Callable[[str], bool], template: str) -> ToolCallFormat:
        """The format the vocabulary and chat template imply: a variant the vocabulary or template names,
        else the family's first."""
        return next((f for f in self.formats[1:] if f.picked_by(is_single_token, template)), self.formats[0])
