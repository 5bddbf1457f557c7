"""DeepSeek V3/R1 and V3.1, where the real tokens use U+FF5C for `|` and U+2581 for `_` (`ds_token`).

- V3/R1: `<|tool_calls_begin|>` then per call `<|tool_call_begin|>function<|tool_sep|>NAME` and the
  arguments in a ```json fence, closed by `<|tool_call_end|>`, then `<|tool_calls_end|>` (the format of
  DeepSeek-V3's chat template, which vLLM's deepseek_v3 tool parser reads);
- V3.1: `<|tool_calls_begin|><|tool_call_begin|>NAME<|tool_sep|>{json}<|tool_call_end|>...`, the same
  vocabulary: the chat template tells them apart.
"""

from __future__ import annotations

import re

from farm.chat.families.arguments import NAME
from farm.chat.families.record import ModelFamily, Schemas, Split, ToolCallFormat
from farm.chat.tool_calls import ToolCall, json_arguments


def ds_token(name: str) -> str:
    """A DeepSeek special token by its ASCII spelling: ds_token("tool_sep") is <\uff5ctool\u2581sep\uff5c>."""
    return "<\uff5c" + name.replace("_", "\u2581") + "\uff5c>"


DS_BEGIN, DS_END = ds_token("tool_calls_begin"), ds_token("tool_calls_end")
DS_CALL, DS_SEP, DS_CALL_END = ds_token("tool_call_begin"), ds_token("tool_sep"), ds_token("tool_call_end")
_DS_CALL = re.compile(
    re.escape(DS_CALL)
    + r"(?P<type>\w+)"
    + re.escape(DS_SEP)
    + r"(?P<name>[^\n]+)\n```(?:json)?\n(?P<args>.*?)\n```"
    + re.escape(DS_CALL_END),
    re.DOTALL,
)


def split_deepseek_v3(text: str, schemas: Schemas | None = None) -> Split:
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


def split_deepseek_v31(text: str, schemas: Schemas) -> Split:
    start = text.find(DS_BEGIN)
    if start < 0:
        return text, [], []
    body = text[start + len(DS_BEGIN) :].partition(DS_END)[0]
    calls: list[ToolCall] = []
    errors: list[str] = []
    chunks = body.split(DS_CALL)[1:]
    if not chunks:
        errors.append("tool calls block holds no call")
    for number, chunk in enumerate(chunks, 1):
        name, has_sep, rest = chunk.partition(DS_SEP)
        raw, closed, _ = rest.partition(DS_CALL_END)
        if not has_sep or not closed or not NAME.match(name.strip()):
            errors.append(
                f"tool call {number}: expected NAME{DS_SEP}{{json}}{DS_CALL_END}, got {chunk[:60]!r}"
            )
            continue
        arguments = json_arguments(raw.strip(), f"tool call {number} ({name.strip()})", errors)
        if arguments is not None:
            calls.append(ToolCall(name=name.strip(), arguments=arguments))
    return text[:start], calls, errors


_SIGNATURES = (re.compile(re.escape(DS_BEGIN) + "|" + re.escape(DS_CALL)),)
DEEPSEEK_V3 = ToolCallFormat(
    "deepseek_v3",
    split_deepseek_v3,
    _SIGNATURES,
    f"{DS_BEGIN}{DS_CALL}function{DS_SEP}NAME\n```json\n{{...}}\n```{DS_CALL_END}{DS_END}",
    f'{DS_BEGIN}{DS_CALL}function{DS_SEP}python\n```json\n{{"code": "print(1)"}}\n```{DS_CALL_END}{DS_END}',
    models="DeepSeek V3, R1-0528",
    aliases=("deepseekv3", "deepseek_r1"),
)
DEEPSEEK_V31 = ToolCallFormat(
    "deepseek_v31",
    split_deepseek_v31,
    _SIGNATURES,
    f"{DS_BEGIN}{DS_CALL}NAME{DS_SEP}{{...}}{DS_CALL_END}{DS_END}",
    f'{DS_BEGIN}{DS_CALL}python{DS_SEP}{{"code": "print(1)"}}{DS_CALL_END}{DS_END}',
    models="DeepSeek V3.1",
    aliases=("deepseekv31",),
    template="templates/deepseek-ai-DeepSeek-V3.1.jinja",
    template_has=(DS_SEP,),
    template_lacks=("function" + DS_SEP,),
)
FAMILY = ModelFamily(
    "deepseek",
    "DeepSeek V3 / R1 / V3.1 (`<|User|>`, `<|Assistant|>`, full-width bars)",
    markers=(DS_BEGIN,),
    formats=(DEEPSEEK_V3, DEEPSEEK_V31),
    call_marker=DS_BEGIN,
)
