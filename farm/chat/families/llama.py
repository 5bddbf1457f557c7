"""Llama 3.x and 4 (header turns, `<|start_header_id|>ROLE<|end_header_id|>`).

- llama3_json (Llama 3.x): `{"name": ..., "parameters": {...}}` (or `arguments`), several joined by `;`,
  maybe after `<|python_tag|>`; `<|python_tag|>tool.call(k=v)` is a built-in tool call, and any other
  text after `<|python_tag|>` is code for Llama's built-in `code_interpreter`.
- pythonic (Llama 3.2 / Llama 4, and Gemma 3, farm/chat/families/gemma.py): `[name(a=1, b="x"), other()]`,
  Llama 4 inside `<|python_start|>...<|python_end|>`.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any

from farm.chat.families.record import ModelFamily, Schemas, Split, ToolCallFormat
from farm.chat.tool_calls import ToolCall, call_from

PYTHON_TAG, EOM = "<|python_tag|>", "<|eom_id|>"
PYTHON_START, PYTHON_END = "<|python_start|>", "<|python_end|>"
HEADER = "<|start_header_id|>"


def split_llama3_json(text: str, schemas: Schemas) -> Split:
    """JSON calls anywhere in the text (as vLLM's llama3_json reads every `{`), the rest is content."""
    head, tagged, tail = text.partition(PYTHON_TAG)
    if tagged:
        body = tail.removesuffix(EOM).strip()
        if body.startswith("{"):
            _, calls, errors = _llama_objects(body)
            return head, calls, errors if calls or errors else ["no call after <|python_tag|>"]
        return head, *_builtin_call(body)
    return _llama_objects(text)


def _llama_objects(text: str) -> Split:
    decoder = json.JSONDecoder()
    outside: list[str] = []
    calls: list[ToolCall] = []
    errors: list[str] = []
    cursor = 0
    at = text.find("{")
    while at >= 0:
        try:
            value, end = decoder.raw_decode(text, at)
        except json.JSONDecodeError as exc:
            if re.match(r'\{\s*"name"\s*:', text[at:]):
                errors.append(f"tool call {len(calls) + len(errors) + 1}: invalid JSON ({exc.msg})")
                outside.append(text[cursor:at])
                cursor = len(text)
                break
            at = text.find("{", at + 1)
            continue
        if isinstance(value, dict) and "name" in value and ("parameters" in value or "arguments" in value):
            call = _llama_call(value, len(calls) + len(errors) + 1, errors)
            outside.append(text[cursor:at])
            cursor = end
            if call is not None:
                calls.append(call)
        at = text.find("{", end)
    outside.append(text[cursor:])
    content = "".join(outside)
    if calls:  # the separators between calls are not text the model said
        content = re.sub(r"^[\s;]+|[\s;]+$", "", content)
    return content, calls, errors


def _llama_call(value: dict[str, Any], number: int, errors: list[str]) -> ToolCall | None:
    name = value.get("name")
    if "arguments" in value and "parameters" in value:
        errors.append(f"tool call {number}: both `arguments` and `parameters`")
        return None
    arguments = value.get("parameters", value.get("arguments"))
    if not isinstance(name, str) or not name:
        errors.append(f"tool call {number}: `name` must be a non-empty string")
        return None
    return call_from(name, arguments, f"tool call {number}", errors, field="parameters")


def _builtin_call(body: str) -> tuple[list[ToolCall], list[str]]:
    """`tool.call(k=v)` (Llama 3.1's built-in tools), else the text is code for `code_interpreter`."""
    try:
        node = ast.parse(body, mode="eval").body
    except SyntaxError:
        node = None
    func = node.func if isinstance(node, ast.Call) else None
    if isinstance(func, ast.Attribute) and func.attr == "call" and isinstance(func.value, ast.Name):
        assert isinstance(node, ast.Call)
        try:
            return [ToolCall(name=func.value.id, arguments=_keywords(node))], []
        except ValueError as exc:
            return [], [f"tool call 1 ({func.value.id}): {exc}"]
    return [ToolCall(name="code_interpreter", arguments={"code": body})], []


def _keywords(call: ast.Call) -> dict[str, Any]:
    if call.args:
        raise ValueError("arguments must be passed by keyword")
    out: dict[str, Any] = {}
    for keyword in call.keywords:
        if keyword.arg is None:
            raise ValueError("**kwargs is not a call")
        try:
            out[keyword.arg] = ast.literal_eval(keyword.value)
        except ValueError:
            if isinstance(keyword.value, ast.Name) and keyword.value.id in ("true", "false", "null"):
                out[keyword.arg] = {"true": True, "false": False, "null": None}[keyword.value.id]
            else:
                raise ValueError(f"argument {keyword.arg!r} is not a literal") from None
    return out


def format_pythonic(calls: list[tuple[str, dict[str, Any]]]) -> str:
    """Calls as the `pythonic` parser reads them and vLLM's Gemma 3 tool template writes them:
    `[name(key=value, ...), ...]`, each value as JSON (`true`, `null` read back as Python's)."""
    written = [
        f"{name}("
        + ", ".join(f"{key}={json.dumps(value, ensure_ascii=False)}" for key, value in args.items())
        + ")"
        for name, args in calls
    ]
    return "[" + ", ".join(written) + "]"


_PYTHONIC_START = re.compile(r"\[\s*[A-Za-z_][\w.]*\(")


def split_pythonic(text: str, schemas: Schemas) -> Split:
    head, wrapped, tail = text.partition(PYTHON_START)
    if wrapped:
        text = head + tail.replace(PYTHON_END, "")
    found = _PYTHONIC_START.search(text)
    if found is None:
        return text, [], []
    start = found.start()
    node: ast.expr | None = None
    end = start
    problem = "no closing ]"
    while (end := text.find("]", end) + 1) > 0:
        try:
            node = ast.parse(text[start:end], mode="eval").body
            break
        except SyntaxError as exc:
            problem = exc.msg
    if node is None:
        return text[:start], [], [f"tool call list is not valid Python ({problem})"]
    if not isinstance(node, ast.List) or not all(isinstance(e, ast.Call) for e in node.elts):
        return text[:start], [], ["expected a list of calls: [name(arg=value), ...]"]
    calls: list[ToolCall] = []
    errors: list[str] = []
    for number, element in enumerate(node.elts, 1):
        assert isinstance(element, ast.Call)
        name = ast.unparse(element.func)
        try:
            calls.append(ToolCall(name=name, arguments=_keywords(element)))
        except ValueError as exc:
            errors.append(f"tool call {number} ({name}): {exc}")
    return text[:start] + text[end:], calls, errors


LLAMA3_JSON = ToolCallFormat(
    "llama3_json",
    split_llama3_json,
    (
        re.compile(r'\{\s*"name"\s*:\s*"[^"]*"\s*,\s*"(?:parameters|arguments)"\s*:'),
        re.compile(re.escape(PYTHON_TAG)),
    ),
    '{"name": ..., "parameters": {...}}',
    '{"name": "python", "parameters": {"code": "print(1)"}}',
    models="Llama 3.1 / 3.2 / 3.3",
    aliases=("llama3", "llama4_json"),
    template="templates/meta-llama-Llama-3.1-8B-Instruct.jinja",
)
PYTHONIC = ToolCallFormat(
    "pythonic",
    split_pythonic,
    (
        re.compile(r"(?m)^\s*\[\s*[A-Za-z_][\w.]*\((?:\s*\)|\s*[A-Za-z_]\w*\s*=)"),
        re.compile(re.escape(PYTHON_START)),
    ),
    "[name(key=value, ...)]",
    '[python(code="print(1)")]',
    models="Llama 3.2 / 4 (pythonic), Gemma 3",
    aliases=("llama4_pythonic",),
    vocabulary_has=PYTHON_START,
)
FAMILY = ModelFamily(
    "llama",
    "Llama 3.x / 4 header turns (`<|start_header_id|>ROLE<|end_header_id|>`, `<|eot_id|>`, `<|eom_id|>`)",
    markers=(HEADER, PYTHON_TAG, PYTHON_START),
    formats=(LLAMA3_JSON, PYTHONIC),
)
