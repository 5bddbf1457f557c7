"""Issue 15: Qwen3's real chat template rewrites earlier assistant turns, so a rollout that re-renders
its history to find the next ids cannot continue past the first tool call."""

from __future__ import annotations

import pytest

from farm.agent.conversation import TokenConversation
from farm.chat.tokenizer import ChatTokenizer
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


def sample(tokenizer: ChatTokenizer, text: str) -> Generation:
    ids = tokenizer.encode(text)
    return Generation(token_ids=ids, logprobs=[-0.5] * len(ids), finish_reason="stop")


def test_rerendering_history_is_not_prefix_stable(qwen3: ChatTokenizer) -> None:
    conv = TokenConversation(qwen3, QUESTION, TOOLS)
    call = {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"type": "function", "function": {"name": "python", "arguments": '{"code": "print(3 + 4)"}'}}
        ],
    }
    conv.add_sampled(sample(qwen3, SAMPLED), call)
    with pytest.raises(ValueError, match="not prefix-stable"):
        conv.add_messages([{"role": "tool", "content": "7"}])
