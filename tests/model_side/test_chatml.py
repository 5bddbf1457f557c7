"""Reading a rendered prompt back into messages (what the scripted policy sees)."""

from __future__ import annotations

import json

from hypothesis import given, settings

from farm.chat.tokenizer import ChatTokenizer
from farm.llm.chatml import parse_chatml
from tests.model_side.strategies import conversation, tools


def _normalized(message: dict) -> dict:
    out = {"role": message["role"], "content": (message.get("content") or "")}
    calls = []
    for call in message.get("tool_calls") or []:
        fn = call["function"]
        args = fn["arguments"]
        calls.append((fn["name"], json.loads(args) if isinstance(args, str) else args))
    if calls:
        out["calls"] = calls
    return out


@settings(max_examples=40, deadline=None)
@given(messages=conversation(), tool_list=tools)
def test_parse_inverts_render(tokenizer: ChatTokenizer, messages: list, tool_list: list) -> None:
    parsed = parse_chatml(tokenizer.render(messages, tool_list, add_generation_prompt=True))
    assert parsed.open_role == "assistant" and parsed.open_text == ""
    assert parsed.tools == tool_list
    got = parsed.messages
    if tool_list and messages[0]["role"] != "system":
        assert got[0] == {"role": "system", "content": "You are a helpful assistant."}
        got = got[1:]
    assert len(got) == len(messages)
    for original, back in zip(messages, got, strict=True):
        expected = _normalized(original)
        actual = _normalized(back)
        if original["role"] == "assistant":
            # The parser strips the text around calls; the template renders it verbatim.
            expected["content"] = expected["content"].strip()
        assert actual == expected


def test_open_turn_with_prefilled_text() -> None:
    parsed = parse_chatml("<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\nThe answ")
    assert parsed.messages == [{"role": "user", "content": "hi"}]
    assert (parsed.open_role, parsed.open_text) == ("assistant", "The answ")
