"""Tool-call formats beyond Hermes, Mistral and DeepSeek V3 (those are in tool_calls.py and
family_tool_calls.py), each read from the sampled text as the inference servers' parsers read it
(the sources, and the conformance cases written from them: tests/model_side/test_tool_parsers.py).

- Qwen3-Coder: `<tool_call>\\n<function=NAME>\\n<parameter=KEY>\\nVALUE\\n</parameter>...</function>\\n
  </tool_call>`; a value is text, converted by the type its tool's schema gives the parameter.
- Llama 3.x JSON: `{"name": ..., "parameters": {...}}` (or `arguments`), several joined by `;`, maybe
  after `<|python_tag|>`; `<|python_tag|>tool.call(k=v)` is a built-in tool call, and any other text
  after `<|python_tag|>` is code for Llama's built-in `code_interpreter`.
- Pythonic (Llama 3.2 / Llama 4): `[name(a=1, b="x"), other()]`, Llama 4 inside
  `<|python_start|>...<|python_end|>`.
- DeepSeek V3.1: `<|tool_calls_begin|><|tool_call_begin|>NAME<|tool_sep|>{json}<|tool_call_end|>...`
  (full-width bars, see family_tool_calls.ds_token).
- GLM-4.5 / 4.6: `<tool_call>NAME\\n<arg_key>K</arg_key>\\n<arg_value>V</arg_value>\\n</tool_call>`.
- Kimi K2: `<|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:N<|tool_call_argument_begin|>
  {json}<|tool_call_end|><|tool_calls_section_end|>`; `functions.NAME:N` is also the call's id.

Each splitter returns (text outside the calls, calls, errors) and never raises: a block that cannot
become a call is one error message, which the agent loop feeds back to the model.
"""

from __future__ import annotations

import ast
import contextlib
import json
import re
from collections.abc import Mapping
from typing import Any

from farm.chat.family_tool_calls import ds_token, json_arguments
from farm.chat.tool_calls import TOOL_CALL_CLOSE, TOOL_CALL_OPEN, ToolCall, call_from

Schemas = Mapping[str, Mapping[str, Any]]
"""Tool name -> its parameters' JSON schema (what typed formats convert argument text by)."""
Split = tuple[str, list[ToolCall], list[str]]

PYTHON_TAG, EOM = "<|python_tag|>", "<|eom_id|>"
PYTHON_START, PYTHON_END = "<|python_start|>", "<|python_end|>"
KIMI_SECTION = ("<|tool_calls_section_begin|>", "<|tool_calls_section_end|>")
KIMI_CALL, KIMI_ARGS, KIMI_END = "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>"
DS_BEGIN, DS_END = ds_token("tool_calls_begin"), ds_token("tool_calls_end")
DS_CALL, DS_SEP, DS_CALL_END = ds_token("tool_call_begin"), ds_token("tool_sep"), ds_token("tool_call_end")

_FUNCTION = re.compile(r"<function=([^>\n]*)>(.*?)(?:</function>|$)", re.DOTALL)
_PARAMETER = re.compile(
    r"<parameter=([^>\n]*)>(.*?)(?:</parameter>|(?=<parameter=)|(?=</function>)|$)", re.DOTALL
)
_GLM_ARG = re.compile(r"<arg_key>(.*?)</arg_key>\s*<arg_value>(.*?)</arg_value>", re.DOTALL)
_KIMI_ID = re.compile(r"^(?:functions\.)?([\w.\-]+):(\d+)$")
_NAME = re.compile(r"^[A-Za-z_][\w.\-]*$")


def _property_type(schemas: Schemas, tool: str, key: str) -> str | None:
    """The JSON-schema type of one parameter (first of a list / anyOf), None when the schema lacks it."""
    properties = (schemas.get(tool) or {}).get("properties") or {}
    spec = properties.get(key) if isinstance(properties, Mapping) else None
    if not isinstance(spec, Mapping):
        return None
    kind = spec.get("type")
    if kind is None:
        for option in spec.get("anyOf") or spec.get("oneOf") or []:
            if isinstance(option, Mapping) and option.get("type") not in (None, "null"):
                kind = option["type"]
                break
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), None)
    if kind is None and "enum" in spec:
        kind = "string"
    return str(kind) if kind is not None else None


def _typed(value: str, kind: str | None) -> Any:
    """Qwen3-Coder's argument text converted as the servers convert it: `null` is None whatever the type;
    kept as text for strings and for parameters the schema does not type, else read as an integer,
    number, boolean, or JSON (a Python literal as a fallback, the text itself as the last)."""
    if value.lower() == "null":
        return None
    if kind is None or kind in ("string", "str", "text", "varchar", "char", "enum"):
        return value
    if kind.startswith(("int", "uint", "long", "short", "unsigned")):
        try:
            return int(value)
        except ValueError:
            return value
    if kind.startswith(("num", "float")):
        try:
            number = float(value)
        except ValueError:
            return value
        return int(number) if number.is_integer() and not any(c in value for c in ".eE") else number
    if kind in ("boolean", "bool", "binary"):
        return value.lower() == "true"
    with contextlib.suppress(json.JSONDecodeError):
        return json.loads(value)
    return _literal(value)


def _literal(value: str) -> Any:
    try:
        return ast.literal_eval(value)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return value


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
            parsed = _typed(parsed, "number")
        if kind == "string" and not isinstance(parsed, (str, dict, list)):
            return value
        return parsed
    if kind == "string":
        quoted = len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'"
        return value[1:-1] if quoted else value
    return _literal(value)


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
        if not _NAME.match(name):
            errors.append(f"tool call {number}: bad function name {name!r}")
            continue
        arguments: dict[str, Any] = {}
        for parameter in _PARAMETER.finditer(match[2]):
            key = parameter[1].strip()
            value = parameter[2].removeprefix("\n").removesuffix("\n")
            arguments[key] = _typed(value, _property_type(schemas, name, key))
        calls.append(ToolCall(name=name, arguments=arguments))
    return text[:start], calls, errors


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
        if not _NAME.match(name):
            errors.append(
                f"tool call {number}: expected a function name after {TOOL_CALL_OPEN}, got {name[:40]!r}"
            )
            continue
        arguments = {
            key.strip(): _glm_typed(value, _property_type(schemas, name, key.strip()))
            for key, value in _GLM_ARG.findall(rest)
        }
        calls.append(ToolCall(name=name, arguments=arguments))
    return text[:start], calls, errors


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
        if not has_sep or not closed or not _NAME.match(name.strip()):
            errors.append(
                f"tool call {number}: expected NAME{DS_SEP}{{json}}{DS_CALL_END}, got {chunk[:60]!r}"
            )
            continue
        arguments = json_arguments(raw.strip(), f"tool call {number} ({name.strip()})", errors)
        if arguments is not None:
            calls.append(ToolCall(name=name.strip(), arguments=arguments))
    return text[:start], calls, errors


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
