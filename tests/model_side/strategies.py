"""Hypothesis strategies for chat messages and tool-call arguments."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import strategies as st

MARKUP = ("<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>")

plain_text = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40).filter(
    lambda s: "<|" not in s and not any(m in s for m in MARKUP)
)
"""Free text without chat markup (markup inside content is the model's business, not the template's)."""

tricky_text = st.one_of(
    plain_text, st.sampled_from(["", " ", "\n", "\n\n", "{", "}", "a\n", " x ", "é漢字🙂"])
)

names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,15}", fullmatch=True)

scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(10**6), 10**6)
    | st.floats(allow_nan=False, allow_infinity=False)
)
json_values = st.recursive(
    scalars | plain_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(plain_text, inner, max_size=3),
    max_leaves=8,
)  # fmt: skip
arguments = st.dictionaries(plain_text, json_values, max_size=4)


@st.composite
def tool_call(draw: st.DrawFn) -> dict[str, Any]:
    args = draw(arguments)
    encoded = draw(st.booleans())
    return {
        "id": "call_x",
        "type": "function",
        "function": {
            "name": draw(names),
            "arguments": json.dumps(args, ensure_ascii=False) if encoded else args,
        },
    }


@st.composite
def message(draw: st.DrawFn) -> dict[str, Any]:
    role = draw(st.sampled_from(["user", "assistant", "tool"]))
    if role == "assistant":
        msg: dict[str, Any] = {"role": "assistant", "content": draw(st.one_of(st.none(), tricky_text))}
        calls = draw(st.lists(tool_call(), max_size=2))
        if calls:
            msg["tool_calls"] = calls
        return msg
    return {"role": role, "content": draw(tricky_text)}


@st.composite
def conversation(draw: st.DrawFn) -> list[dict[str, Any]]:
    messages = draw(st.lists(message(), min_size=1, max_size=6))
    if draw(st.booleans()):
        messages.insert(0, {"role": "system", "content": draw(tricky_text)})
    return messages


tools = st.lists(
    st.builds(
        lambda n: {"type": "function", "function": {"name": n, "parameters": {"type": "object"}}}, names
    ),
    max_size=2,
)
