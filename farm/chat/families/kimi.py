"""Kimi K2 (`<|im_user|>user<|im_middle|>...<|im_end|>`): `<|tool_calls_section_begin|><|tool_call_begin|>
functions.NAME:N<|tool_call_argument_begin|>{json}<|tool_call_end|><|tool_calls_section_end|>`;
`functions.NAME:N` is also the call's id (SGLang's kimik2_detector.py)."""

from __future__ import annotations

import re

from farm.chat.families.record import ModelFamily, Schemas, Split, ToolCallFormat
from farm.chat.tool_calls import ToolCall, json_arguments

KIMI_SECTION = ("<|tool_calls_section_begin|>", "<|tool_calls_section_end|>")
KIMI_CALL, KIMI_ARGS, KIMI_END = "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>"
_KIMI_ID = re.compile(r"^(?:functions\.)?([\w.\-]+):(\d+)$")


def split_kimi_k2(text: str, schemas: Schemas) -> Split:
    start = text.find(KIMI_SECTION[0])
    if start < 0:
        bare = text.find(KIMI_CALL)
        if bare < 0:
            return text, [], []
        start = bare
    body = text[start:].removeprefix(KIMI_SECTION[0]).partition(KIMI_SECTION[1])[0]
    calls: list[ToolCall] = []
    errors: list[str] = []
    chunks = body.split(KIMI_CALL)[1:]
    if not chunks:
        errors.append(f"tool call 1: {KIMI_SECTION[0]} holds no {KIMI_CALL}")
    for number, chunk in enumerate(chunks, 1):
        head, has_args, rest = chunk.partition(KIMI_ARGS)
        raw, closed, _ = rest.partition(KIMI_END)
        found = _KIMI_ID.match(head.strip())
        if not has_args or not closed or found is None:
            errors.append(
                f"tool call {number}: not functions.NAME:N{KIMI_ARGS}{{json}}{KIMI_END} ({chunk[:60]!r})"
            )
            continue
        arguments = json_arguments(raw.strip(), f"tool call {number} ({found[1]})", errors)
        if arguments is not None:
            calls.append(ToolCall(id=head.strip(), name=found[1], arguments=arguments))
    return text[:start], calls, errors


KIMI_K2 = ToolCallFormat(
    "kimi_k2",
    split_kimi_k2,
    (re.compile(re.escape(KIMI_SECTION[0]) + "|" + re.escape(KIMI_CALL)),),
    f"{KIMI_SECTION[0]}{KIMI_CALL}functions.NAME:0{KIMI_ARGS}{{...}}{KIMI_END}{KIMI_SECTION[1]}",
    f'{KIMI_SECTION[0]}{KIMI_CALL}functions.python:0{KIMI_ARGS}{{"code": "print(1)"}}{KIMI_END}'
    f"{KIMI_SECTION[1]}",
    models="Kimi K2",
    aliases=("kimik2",),
    template="templates/moonshotai-Kimi-K2.jinja",
)
FAMILY = ModelFamily(
    "kimi",
    "Kimi K2 role tokens (`<|im_user|>`, `<|im_middle|>`, `<|im_end|>`)",
    markers=("<|im_middle|>", KIMI_SECTION[0]),
    formats=(KIMI_K2,),
)
