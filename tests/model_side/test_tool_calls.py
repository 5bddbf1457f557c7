"""Hermes tool-call parsing: round trips, and one error per block that cannot become a call."""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from farm.chat.tool_calls import format_tool_call, parse_assistant
from tests.model_side.strategies import arguments, names, plain_text


@settings(max_examples=120, deadline=None)
@given(calls=st.lists(st.tuples(names, arguments), min_size=1, max_size=3), before=plain_text)
def test_format_then_parse_round_trips(calls: list[tuple[str, dict[str, Any]]], before: str) -> None:
    text = before + "\n" + "\n".join(format_tool_call(n, a) for n, a in calls) + "<|im_end|>"
    parsed = parse_assistant(text)
    assert parsed.errors == []
    assert [(c.name, c.arguments) for c in parsed.tool_calls] == calls
    assert parsed.content == before.strip()
    assert len({c.id for c in parsed.tool_calls}) == len(calls)


def test_plain_answer_strips_eot_and_keeps_text() -> None:
    parsed = parse_assistant("The answer is \\boxed{7}.<|im_end|>")
    assert parsed.content == "The answer is \\boxed{7}."
    assert parsed.tool_calls == [] and parsed.errors == [] and parsed.reasoning is None


def test_reasoning_is_split_out() -> None:
    parsed = parse_assistant("<think>\n3 + 4 is 7\n</think>\n\nSeven.<|im_end|>")
    assert parsed.reasoning == "3 + 4 is 7"
    assert parsed.content == "Seven."
    # A template that opens <think> in the prompt: the answer starts inside the block.
    assert parse_assistant("hmm</think>ok").reasoning == "hmm"
    assert parse_assistant("<think>cut off while thin").reasoning == "cut off while thin"


def test_each_broken_block_gives_one_error() -> None:
    text = (
        "Trying.\n"
        '<tool_call>\n{"name": "ok", "arguments": {"x": 1}}\n</tool_call>\n'
        "<tool_call>\n{not json}\n</tool_call>\n"
        '<tool_call>\n{"arguments": {}}\n</tool_call>\n'
        '<tool_call>\n{"name": "f", "arguments": [1, 2]}\n</tool_call>\n'
        "<tool_call>\n[1]\n</tool_call>\n"
        '<tool_call>\n{"name": "g", "arguments": {}'
    )
    parsed = parse_assistant(text)
    assert [c.name for c in parsed.tool_calls] == ["ok"]
    assert len(parsed.errors) == 5
    assert "invalid JSON" in parsed.errors[0]
    assert "missing function `name`" in parsed.errors[1]
    assert "`arguments` must be a JSON object" in parsed.errors[2]
    assert "expected a JSON object" in parsed.errors[3]
    assert "unclosed <tool_call>" in parsed.errors[4]
    assert parsed.content == "Trying."


def test_lenient_on_missing_or_string_encoded_arguments() -> None:
    parsed = parse_assistant(
        '<tool_call>{"name": "a"}</tool_call>'
        '<tool_call>{"name": "b", "arguments": "{\\"k\\": 2}"}</tool_call>'
    )
    assert [(c.name, c.arguments) for c in parsed.tool_calls] == [("a", {}), ("b", {"k": 2})]


def test_stray_closing_tag_is_reported() -> None:
    parsed = parse_assistant("done</tool_call>")
    assert parsed.errors and "stray" in parsed.errors[0]
    assert parsed.content == "done"


def test_to_openai_encodes_arguments_as_json_string() -> None:
    call = parse_assistant(format_tool_call("f", {"é": [1, None]})).tool_calls[0]
    assert call.to_openai()["function"] == {"name": "f", "arguments": '{"é": [1, null]}'}
