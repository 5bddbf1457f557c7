"""Mistral: `[TOOL_CALLS]` then a JSON list of {"name", "arguments"} (tokenizer v3-v7), or
`[TOOL_CALLS]name[CALL_ID]id[ARGS]{json}` repeated (v11; v13 writes no `[CALL_ID]id`), as mistral-common
encodes them (mistral_common/tokens/tokenizers/instruct.py InstructTokenizerV11/V13). The prompt is
mistral-common's own encoding (farm/chat/mistral.py), not a Jinja template."""

from __future__ import annotations

import json
import re

from farm.chat.families.record import ModelFamily, Schemas, Split, ToolCallFormat
from farm.chat.tool_calls import ToolCall, json_arguments

MISTRAL_CALLS, MISTRAL_ARGS, MISTRAL_CALL_ID = "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"


def split_mistral(text: str, schemas: Schemas | None = None) -> Split:
    head, sep, rest = text.partition(MISTRAL_CALLS)
    if not sep:
        return text, [], []
    calls: list[ToolCall] = []
    errors: list[str] = []
    chunks = [c for c in rest.split(MISTRAL_CALLS)]
    if MISTRAL_ARGS in rest:
        for number, chunk in enumerate(chunks, 1):
            name, has_args, raw = chunk.partition(MISTRAL_ARGS)
            args = json_arguments(raw.strip(), f"tool call {number}", errors) if has_args else None
            if not has_args:
                errors.append(f"tool call {number}: no {MISTRAL_ARGS}")
            elif args is not None:
                name, _, call_id = name.partition(MISTRAL_CALL_ID)
                given = {"id": call_id.strip()} if call_id.strip() else {}
                calls.append(ToolCall(name=name.strip(), arguments=args, **given))
        return head, calls, errors
    try:
        items = json.loads(rest.strip())
    except json.JSONDecodeError as exc:
        return head, [], [f"{MISTRAL_CALLS} is not followed by a JSON list ({exc.msg})"]
    for number, item in enumerate(items if isinstance(items, list) else [items], 1):
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            errors.append(f"tool call {number}: no name")
            continue
        args = json_arguments(item.get("arguments", {}), f"tool call {number}", errors)
        if args is not None:
            # v3 answers carry the call's id (mistral-common renders it back in [TOOL_RESULTS])
            given = {"id": item["id"]} if isinstance(item.get("id"), str) and item["id"] else {}
            calls.append(ToolCall(name=item["name"], arguments=args, **given))
    return head, calls, errors


MISTRAL = ToolCallFormat(
    "mistral",
    split_mistral,
    (re.compile(re.escape(MISTRAL_CALLS)),),
    '[TOOL_CALLS][{"name": ..., "arguments": {...}}]',
    '[TOOL_CALLS][{"name": "python", "arguments": {"code": "print(1)"}}]',
    models="Mistral (tokenizer v3 to v13)",
)
FAMILY = ModelFamily(
    "mistral",
    "mistral-common's request encoding (`[INST]`, `[AVAILABLE_TOOLS]`, `[TOOL_RESULTS]`)",
    markers=(MISTRAL_CALLS,),
    formats=(MISTRAL,),
    call_marker=MISTRAL_CALLS,
)
