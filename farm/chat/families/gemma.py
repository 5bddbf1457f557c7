"""Gemma 3 (`<start_of_turn>ROLE ... <end_of_turn>`): its published template has no tool role and
renders no tool calls; the calls are the `pythonic` list vLLM reads for Gemma 3 (`[name(key=value)]`,
prompted by vLLM's examples/tool_chat_template_gemma3_pythonic.jinja)."""

from __future__ import annotations

from farm.chat.families.llama import PYTHONIC
from farm.chat.families.record import ModelFamily

START_OF_TURN = "<start_of_turn>"

FAMILY = ModelFamily(
    "gemma",
    "Gemma 3 turns (`<start_of_turn>user`, `<start_of_turn>model`, `<end_of_turn>`)",
    markers=(START_OF_TURN,),
    formats=(PYTHONIC,),
)
