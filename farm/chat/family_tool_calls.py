"""Tool calls in the formats of model families other than Hermes (`<tool_call>`, see tool_calls.py).

- Mistral: `[TOOL_CALLS]` then a JSON list of {"name", "arguments"} (tokenizer v3-v7), or
  `[TOOL_CALLS]name[CALL_ID]id[ARGS]{json}` repeated (v11; v13 writes no `[CALL_ID]id`), as
  mistral-common encodes them (mistral_common/tokens/tokenizers/instruct.py InstructTokenizerV11/V13).
- DeepSeek V3/R1: `<|tool_calls_begin|>` then per call `<|tool_call_begin|>function<|tool_sep|>NAME`
  and the arguments in a ```json fence, closed by `<|tool_call_end|>`, then `<|tool_calls_end|>`,
  where the real tokens use U+FF5C for `|` and U+2581 for `_` (see `ds_token`); the format of
  DeepSeek-V3's chat template, which vLLM's deepseek_v3 tool parser reads.
Each parser returns (text before the calls, calls, errors); a malformed call is an error, never a raise.
"""

from __future__ import annotations

import json
import re
from typing import Any

from farm.chat.tool_calls import ToolCall

MISTRAL_CALLS, MISTRAL_ARGS, MISTRAL_CALL_ID = "[TOOL_CALLS]", "[ARGS]", "[CALL_ID]"


def ds_token(name: str) -> str:
    """A DeepSeek special token by its ASCII spelling: ds_token("tool_sep") is <\uff5ctool\u2581sep\uff5c>."""
    return "<\uff5c" + name.replace("_", "\u2581") + "\uff5c>"


DS_BEGIN, DS_END = ds_token("tool_calls_begin"), ds_token("tool_calls_end")
_DS_CALL = re.compile(
    re.escape(ds_token("tool_call_begin"))
    + r"(?P<type>\w+)"
    + re.escape(ds_token("tool_sep"))
    + r"(?P<name>[^\n]+)\n```(?:json)?\n(?P<args>.*?)\n```"
    + re.escape(ds_token("tool_call_end")),
    re.DOTALL,
)


def json_arguments(raw: Any, where: str, errors: list[str]) -> dict[str, Any] | None:
    """A call's arguments as a JSON object (given as one, or as its JSON text); None with the reason in
    `errors`, prefixed by `where` (e.g. "tool call 2 (search)")."""
    if isinstance(raw, str):
        try:
            raw = json.loads(raw)
        except json.JSONDecodeError as exc:
            errors.append(f"{where}: arguments are not JSON ({exc.msg})")
            return None
    if not isinstance(raw, dict):
        errors.append(f"{where}: arguments must be a JSON object")
        return None
    return raw


def parse_mistral(text: str) -> tuple[str, list[ToolCall], list[str]]:
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


def parse_deepseek(text: str) -> tuple[str, list[ToolCall], list[str]]:
    head, sep, rest = text.partition(DS_BEGIN)
    if not sep:
        return text, [], []
    calls: list[ToolCall] = []
    errors: list[str] = []
    body = rest.split(DS_END, 1)[0]
    matches = list(_DS_CALL.finditer(body))
    if not matches:
        errors.append("tool calls block holds no well-formed call")
    for number, match in enumerate(matches, 1):
        args = json_arguments(match["args"], f"tool call {number}", errors)
        if args is not None:
            calls.append(ToolCall(name=match["name"].strip(), arguments=args))
    return head, calls, errors
