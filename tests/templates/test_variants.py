"""Templates that rewrite earlier turns (tests/templates/variants.py) cannot break a rollout or change a
sampled token: the token invariant holds on every trace (property-tested), and each variant really does
rewrite history (re-rendering is not prefix-stable for it)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from farm.agent.conversation import TokenConversation
from farm.chat.tokenizer import ChatTokenizer
from farm.inference import Generation
from tests.model_side.strategies import arguments, plain_text
from tests.templates.variants import VARIANTS, variant

TOOLS = [{"type": "function", "function": {"name": "python", "parameters": {"type": "object"}}}]
SHIPPED = ChatTokenizer.load()
TOKENIZERS = {name: variant(name) for name in VARIANTS}

turn = st.tuples(
    plain_text,  # reasoning ("" = none)
    plain_text,  # content
    st.none() | arguments,  # tool-call arguments, or no call
    st.booleans(),  # answered by a tool turn (else a user turn)
    plain_text,  # the answer's text
)


def assistant(reasoning: str, content: str, args: dict[str, Any] | None) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if reasoning.strip():
        message["reasoning_content"] = reasoning
    if args is not None:
        message["tool_calls"] = [{"type": "function", "function": {"name": "python", "arguments": args}}]
    return message


def run(tokenizer: ChatTokenizer, turns: list) -> tuple[TokenConversation, list[int]]:
    conv = TokenConversation(tokenizer, [{"role": "user", "content": "start"}], TOOLS)
    sampled: list[int] = []
    for reasoning, content, args, by_tool, answer in turns:
        message = assistant(reasoning, content, args)
        ids = tokenizer.encode(tokenizer.assistant_text(message))
        sampled += ids
        conv.add_sampled(Generation(token_ids=ids, logprobs=[-1.0] * len(ids), finish_reason="stop"), message)
        conv.add_messages([{"role": "tool" if by_tool else "user", "content": answer}])
    return conv, sampled


@pytest.mark.parametrize("name", sorted(VARIANTS))
@settings(max_examples=15, deadline=None)
@given(turns=st.lists(turn, min_size=1, max_size=4))
def test_token_invariant_holds_on_every_trace(name: str, turns: list) -> None:
    tokenizer = TOKENIZERS[name]
    conv, sampled = run(tokenizer, turns)
    assert [t for t, m in zip(conv.response_ids, conv.loss_mask, strict=True) if m] == sampled
    assert len(conv.response_ids) == len(conv.loss_mask) == len(conv.logprobs)
    # Every appended segment is a whole turn that ends at the generation prompt.
    assert tokenizer.decode(conv.context_ids).endswith("<|im_start|>assistant\n")
    for *_, answer in turns:
        assert answer in tokenizer.decode(conv.response_ids)


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_variant_rewrites_history(name: str) -> None:
    tokenizer = TOKENIZERS[name]
    prompt = [{"role": "user", "content": "q"}]
    call = assistant("think", "a", None) | {
        "tool_calls": [{"function": {"name": "python", "arguments": '{"code": "1"}'}}]
    }
    # What the model emitted (the canonical Hermes text) after the prompt it was given.
    trajectory = tokenizer.render(prompt, TOOLS, add_generation_prompt=True) + SHIPPED.assistant_text(call)
    new = [{"role": "tool", "content": "1"}, {"role": "user", "content": "more"}]
    rerendered = tokenizer.render([*prompt, call, *new], TOOLS, add_generation_prompt=True)
    assert not rerendered.startswith(trajectory)
