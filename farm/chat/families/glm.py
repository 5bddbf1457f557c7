"""GLM-4.5 / 4.6 (`[gMASK]<sop>`, `<|system|>`, `<|user|>`, `<|assistant|>`, `<|observation|>`):
`<tool_call>NAME\n<arg_key>K</arg_key>\n<arg_value>V</arg_value>\n</tool_call>` (SGLang's
glm4_moe_detector.py)."""

from __future__ import annotations

import contextlib
import json
import re
from typing import Any

from farm.chat.families.arguments import NAME, literal, property_type, typed
from farm.chat.families.record import ModelFamily, Schemas, Split, ToolCallFormat
from farm.chat.tool_calls import TOOL_CALL_CLOSE, TOOL_CALL_OPEN, ToolCall

_GLM_ARG = re.compile(r"<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>", re.DOTALL)

_MISSING = object()


def _glm_typed(value: str, kind: str | None) -> Any:
    """GLM's argument text as SGLang's glm45 reads it: JSON when it is JSON (a string-typed parameter
    keeps the text of a bare number or boolean), else for strings the text without wrapping quotes,
    else a Python literal, else the text."""
    parsed: Any = _MISSING
    with contextlib.suppress(json.JSONDecodeError):
        parsed = json.loads(value)
    if parsed is not _MISSING:
        if kind == "number" and isinstance(parsed, str):
            parsed = typed(parsed, "number")
        if kind == "string" and not isinstance(parsed, (str, dict, list)):
            return value
        return parsed
    if kind == "string":
        quoted = len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'"
        return value[1:-1] if quoted else value
    return literal(value)


def split_glm45(text: str, schemas: Schemas) -> Split:
    start = text.find(TOOL_CALL_OPEN)
    if start < 0:
        return text, [], []
    calls: list[ToolCall] = []
    errors: list[str] = []
    blocks = text[start:].split(TOOL_CALL_OPEN)[1:]
    for number, block in enumerate(blocks, 1):
        inside, closed, _ = block.partition(TOOL_CALL_CLOSE)
        if not closed:
            errors.append(f"tool call {number}: unclosed {TOOL_CALL_OPEN} (no {TOOL_CALL_CLOSE})")
            continue
        cut = min(i for i in (inside.find("\n"), inside.find("<arg_key>"), len(inside)) if i >= 0)
        name, rest = inside[:cut].strip(), inside[cut:]
        if not NAME.match(name):
            errors.append(
                f"tool call {number}: expected a function name after {TOOL_CALL_OPEN}, got {name[:40]!r}"
            )
            continue
        arguments = {
            key.strip(): _glm_typed(value, property_type(schemas, name, key.strip()))
            for key, value in _GLM_ARG.findall(rest)
        }
        calls.append(ToolCall(name=name, arguments=arguments))
    return text[:start], calls, errors


GLM45 = ToolCallFormat(
    "glm45",
    split_glm45,
    (re.compile(r"<tool_call>\s*[A-Za-z_][\w.\-]*\s*(?:\n|<arg_key>)|<arg_key>"),),
    "<tool_call>NAME\n<arg_key>KEY</arg_key>\n<arg_value>VALUE</arg_value>\n</tool_call>",
    "<tool_call>python\n<arg_key>code</arg_key>\n<arg_value>print(1)</arg_value>\n</tool_call>",
    models="GLM-4.5 / 4.6",
    aliases=("glm", "glm4_moe", "glm46"),
    template="templates/zai-org-GLM-4.6.jinja",
)
FAMILY = ModelFamily(
    "glm",
    "GLM-4.5 / 4.6 role tokens (`<|user|>`, `<|assistant|>`, `<|observation|>`)",
    markers=("<|observation|>", "<arg_key>"),
    formats=(GLM45,),
    call_marker=TOOL_CALL_OPEN,
)
