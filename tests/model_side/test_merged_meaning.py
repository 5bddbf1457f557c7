"""The gateway's merged traces (farm/builders/prefix_merging.py) read what was rendered: a re-rendered
assistant turn whose tokens say the same calls in other bytes is re-serialization, one whose tokens say
something else is drift, even when the chat messages the harness sent back look the same."""

from __future__ import annotations

import json
from pathlib import Path

from farm.builders import CompletionRecord, build_traces
from farm.chat.tokenizer import ChatTokenizer

TOK = ChatTokenizer.load()
USER = {"role": "user", "content": "list the files"}
SAMPLED = '<tool_call>\n{"name": "bash", "arguments": {"command": "ls", "timeout": 5}}\n</tool_call>'


def call(arguments: str) -> dict[str, object]:
    function = {"name": "bash", "arguments": arguments}
    return {
        "role": "assistant",
        "content": "",
        "tool_calls": [{"id": "c", "type": "function", "function": function}],
    }


def link(rendered: str, echoed: dict[str, object]) -> list[CompletionRecord]:
    """Two calls of one session: the second prompt holds the first answer as the server re-rendered it."""
    prompt = TOK.apply_chat_template([USER])
    sampled = [*TOK.encode(SAMPLED), TOK.eos_token_id]
    tool = {"role": "tool", "tool_call_id": "c", "content": "a.txt"}
    after = TOK.continuation_ids([tool])
    first = CompletionRecord(
        completion_id="c0", session_id="s", index=0, request_messages=[USER], prompt_ids=prompt,
        response_ids=sampled, response_logprobs=[-0.1] * len(sampled), finish_reason="tool_calls",
        response_message=call('{"command": "ls", "timeout": 5}'),
    )  # fmt: skip
    second_prompt = [*prompt, *TOK.encode(rendered), TOK.eos_token_id, *after]
    second = CompletionRecord(
        completion_id="c1", session_id="s", index=1, request_messages=[USER, echoed, tool],
        prompt_ids=second_prompt, response_ids=[*TOK.encode("done"), TOK.eos_token_id],
        response_logprobs=[-0.1, -0.1], finish_reason="stop",
    )  # fmt: skip
    return [first, second]


def render(arguments: dict[str, object], indent: int | None) -> str:
    payload = json.dumps({"name": "bash", "arguments": arguments}, indent=indent)
    return f"<tool_call>\n{payload}\n</tool_call>"


def test_the_same_call_in_other_bytes_is_reserialization() -> None:
    rendered = render({"timeout": 5, "command": "ls"}, indent=2)
    (trace,) = build_traces("prefix_merging", link(rendered, call('{"timeout": 5, "command": "ls"}')))
    assert trace.metadata["reserialized"] == ["c0"] and trace.metadata["retokenization_drift"] is False
    assert TOK.decode(trace.response_ids).startswith(SAMPLED)  # the sampled tokens stand


def test_a_rendered_change_of_meaning_is_drift_though_the_messages_agree() -> None:
    """The harness's message says `ls`; the prompt the model read next says `rm`."""
    rendered = render({"command": "rm -rf /", "timeout": 5}, indent=None)
    (trace,) = build_traces("prefix_merging", link(rendered, call('{"command": "ls", "timeout": 5}')))
    assert trace.metadata["retokenization_drift"] is True and trace.metadata["reserialized"] == []


def test_without_reading_the_rendered_tokens_the_messages_decide() -> None:
    rendered = render({"command": "rm -rf /", "timeout": 5}, indent=None)
    records = link(rendered, call('{"command": "ls", "timeout": 5}'))
    (trace,) = build_traces("prefix_merging", records, compare_rendered=False)
    assert trace.metadata["reserialized"] == ["c0"]  # what the check on messages alone would miss


def test_tokens_no_tokenizer_can_read_are_flagged_as_unchecked(tmp_path: Path) -> None:
    """Asked to read the rendered tokens with a tokenizer that cannot be loaded, the merge falls back to the
    messages and the trace says which turns were judged that way, never a silent `reserialized`."""
    rendered = render({"command": "rm -rf /", "timeout": 5}, indent=None)
    records = link(rendered, call('{"command": "ls", "timeout": 5}'))
    missing = str(tmp_path / "no-such-tokenizer")
    (trace,) = build_traces("prefix_merging", records, tokenizer=missing)
    assert trace.metadata["reserialized"] == ["c0"] and trace.metadata["reserialized_unchecked"] == ["c0"]
