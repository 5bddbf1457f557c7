"""Argument text to values, shared by the formats that write arguments as JSON or as typed text."""

from __future__ import annotations

import ast
import contextlib
import json
import re
from collections.abc import Mapping
from typing import Any

from farm.chat.families.record import Schemas

NAME = re.compile(r"^[A-Za-z_][\w.\-]*$")
"""A function name as the formats that write it bare accept it."""


def property_type(schemas: Schemas, tool: str, key: str) -> str | None:
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


def typed(value: str, kind: str | None) -> Any:
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
    return literal(value)


def literal(value: str) -> Any:
    try:
        return ast.literal_eval(value)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return value
