"""Hermes / Qwen (ChatML): `<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`
(farm/chat/tool_calls.py, the shipped tokenizer's format), and Qwen3-Coder's XML-like calls in the same
vocabulary: `<tool_call>\\n<function=NAME>\\n<parameter=KEY>\\nVALUE\\n</parameter>...</function>\\n
</tool_call>`, a value's text converted by the type its tool's schema gives the parameter (SGLang's
qwen3_coder_detector.py)."""

from __future__ import annotations

import re
from typing import Any

from farm.chat.families.arguments import NAME, property_type, typed
from farm.chat.families.record import ModelFamily, Schemas, Split, ToolCallFormat
from farm.chat.tool_calls import TOOL_CALL_OPEN, ToolCall, split_hermes

TOOL_RESPONSE_OPEN, TOOL_RESPONSE_CLOSE = "<tool_response>\n", "\n</tool_response>"
"""A tool result in a user turn, as Qwen's templates write results (and the farm, for a template with no
tool role: farm/chat/tokenizer.py template_messages)."""
_FUNCTION = re.compile(r"<function=([^>\n]*)>(.*?)(?:</function>|$)", re.DOTALL)
_PARAMETER = re.compile(
    r"<parameter=([^>\n]*)>(.*?)(?:</parameter>|(?=<parameter=)|(?=</function>)|$)", re.DOTALL
)


def split_qwen3_coder(text: str, schemas: Schemas) -> Split:
    start = text.find(TOOL_CALL_OPEN)
    bare = text.find("<function=")
    if start < 0 or (0 <= bare < start):
        start = bare
    if start < 0:
        return text, [], []
    calls: list[ToolCall] = []
    errors: list[str] = []
    body = text[start:]
    functions = list(_FUNCTION.finditer(body))
    if not functions:
        errors.append(f"tool call 1: no <function=NAME> inside {TOOL_CALL_OPEN}")
    for number, match in enumerate(functions, 1):
        name = match[1].strip()
        if not NAME.match(name):
            errors.append(f"tool call {number}: bad function name {name!r}")
            continue
        arguments: dict[str, Any] = {}
        for parameter in _PARAMETER.finditer(match[2]):
            key = parameter[1].strip()
            value = parameter[2].removeprefix("\n").removesuffix("\n")
            arguments[key] = typed(value, property_type(schemas, name, key))
        calls.append(ToolCall(name=name, arguments=arguments))
    return text[:start], calls, errors


HERMES = ToolCallFormat(
    "hermes",
    lambda text, _: split_hermes(text),
    (re.compile(r"<tool_call>\s*\{"),),
    '<tool_call>\n{"name": ..., "arguments": {...}}\n</tool_call>',
    '<tool_call>\n{"name": "python", "arguments": {"code": "print(1)"}}\n</tool_call>',
    models="Qwen2.5, Qwen3, Hermes",
    aliases=("qwen", "qwen25", "qwen3"),
    template="chat_template.jinja",
)
QWEN3_CODER = ToolCallFormat(
    "qwen3_coder",
    split_qwen3_coder,
    (re.compile(r"<function=[^>\n]*>"),),
    "<tool_call>\n<function=NAME>\n<parameter=KEY>\nVALUE\n</parameter>\n</function>\n</tool_call>",
    "<tool_call>\n<function=python>\n<parameter=code>\nprint(1)\n</parameter>\n</function>\n</tool_call>",
    models="Qwen3-Coder",
    aliases=("qwen3coder",),
    template="templates/Qwen3-Coder.jinja",
    template_has=("<function=", "<parameter="),
)
FAMILY = ModelFamily(
    "hermes",
    "ChatML (Qwen, Hermes); a vocabulary with no other family's marker is read as it",
    markers=(),
    formats=(HERMES, QWEN3_CODER),
    call_marker=TOOL_CALL_OPEN,
)
