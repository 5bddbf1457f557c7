"""The token invariant of a trace, for any tokenizer backend: prompt_ids are the rendered prompt, every
sampled run is one assistant turn (readable in the tokenizer's tool-call family), and every masked run is
exactly the continuation of the messages that followed that turn (end-of-turn added to a cut turn)."""

from __future__ import annotations

import re
from typing import Any

from farm.chat.tokenizer import ChatTokenizer
from farm.models.results import Trace

CLOCK = re.compile(r"Today is \d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+\.")
"""The date-header variant's clock line, different on every render (tests/templates/variants.py)."""


def runs(mask: list[int]) -> list[tuple[int, int, int]]:
    """(mask value, start, end) of each maximal run."""
    out: list[tuple[int, int, int]] = []
    for i, m in enumerate(mask):
        if out and out[-1][0] == m:
            out[-1] = (m, out[-1][1], i + 1)
        else:
            out.append((m, i, i + 1))
    return out


def turns(messages: list[dict[str, Any]]) -> list[tuple[dict[str, Any], list[dict[str, Any]]]]:
    """Each assistant message with the messages appended after it, before the next assistant turn."""
    out: list[tuple[dict[str, Any], list[dict[str, Any]]]] = []
    for message in messages:
        if message["role"] == "assistant":
            out.append((message, []))
        else:
            assert out, "the response starts with an assistant turn"
            out[-1][1].append(message)
    return out


def assert_invariant(trace: Trace, tokenizer: ChatTokenizer) -> None:
    tools = trace.tools or None
    prompt = tokenizer.apply_chat_template(trace.prompt_messages, tools=tools, add_generation_prompt=True)
    if trace.prompt_ids != prompt:  # only a clock line may differ between two renders
        assert CLOCK.sub("", tokenizer.decode(trace.prompt_ids)) == CLOCK.sub("", tokenizer.decode(prompt))
    ids, mask = trace.response_ids, trace.loss_mask
    segments = runs(mask)
    sampled = [(s, e) for m, s, e in segments if m == 1]
    conversation = turns(trace.response_messages)
    assert len(sampled) == len(conversation), (len(sampled), [m["role"] for m in trace.response_messages])
    assert segments[0][0] == 1, "the response opens with sampled tokens"
    for (start, end), (message, after) in zip(sampled, conversation, strict=True):
        parsed = tokenizer.parse_assistant(tokenizer.decode(ids[start:end]))
        assert [c.name for c in parsed.tool_calls] == [
            c["function"]["name"] for c in message.get("tool_calls") or []
        ], (tokenizer.family, tokenizer.decode(ids[start:end]))
        masked_end = next((e for m, s, e in segments if m == 0 and s == end), end)
        expected: list[int] = []
        if after:  # a turn cut by max_tokens is closed with the end-of-turn token first (or, for a
            # template closed by the next role's token, that token unless the turn sampled it)
            if tokenizer.closers:
                continuation = tokenizer.continuation_ids(after, tools)
                sampled_opener = continuation[:1] == ids[end - 1 : end]
                expected = continuation[1:] if sampled_opener else continuation
            else:
                expected = [] if ids[end - 1] in tokenizer.turn_end_ids() else [tokenizer.eos_token_id]
                expected += tokenizer.continuation_ids(after, tools)
        assert ids[end:masked_end] == expected, tokenizer.decode(ids[end:masked_end])


def as_sampled(trace: Trace, tokenizer: ChatTokenizer) -> list[tuple[int, list[dict[str, Any]]]]:
    """Each generation point (where a sampled run starts in the response) with the conversation before it,
    every assistant turn written as the text the model sampled: what a server renders for those messages.
    The farm's context before each point (prompt_ids + response_ids[:start]) equals the template's rendering
    of those messages with the generation prompt (a real server's /tokenize of them) where the template
    renders an earlier turn given as text as that text (Gemma 3's does; Qwen3's drops its reasoning); the
    recorded messages themselves may render otherwise (Gemma 3's template drops a call's text)."""
    messages: list[dict[str, Any]] = list(trace.prompt_messages)
    sampled = [(start, end) for mask, start, end in runs(trace.loss_mask) if mask == 1]
    points = []
    for (start, end), (_, after) in zip(sampled, turns(trace.response_messages), strict=True):
        points.append((start, list(messages)))
        text = trace.response_ids[start:end]
        if text[-1] in tokenizer.turn_end_ids():
            text = text[:-1]
        messages += [{"role": "assistant", "content": tokenizer.decode(text)}, *after]
    return points
