"""Chat templates that rewrite earlier turns, as production templates are known to: reasoning dropped
from earlier assistant turns, a clock header re-rendered on every call, tool-call arguments
re-serialized, a system prompt injected when tools are offered. Each is a variant of the shipped
ChatML template over the shipped vocabulary. With every variant a multi-turn tool rollout continues,
the sampled tokens stay exactly as sampled, and re-rendering the history (what the farm no longer
does) would not have reproduced them."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from farm.agent.conversation import TokenConversation
from farm.chat.tokenizer import ChatTokenizer, HFChatTokenizer
from farm.chat.tool_calls import parse_assistant
from farm.inference.generation import Generation

TURN = "<|im_start|>{{ m.role }}\n"
TOOL_CALLS = """
{%- for call in m.tool_calls or [] -%}
{{- '\\n' if (m.content or not loop.first) else '' -}}
<tool_call>
{"name": {{ call.function.name | tojson }}, "arguments": ARGS}
</tool_call>
{%- endfor -%}"""
BASE = """
{%- set last_assistant = namespace(i=-1) -%}
{%- for m in messages -%}
{%- if m.role == 'assistant' -%}{%- set last_assistant.i = loop.index0 -%}{%- endif -%}
{%- endfor -%}
HEADER
{%- for m in messages -%}
{%- if m.role == 'assistant' -%}
<|im_start|>assistant
{% if REASONING_KEPT and m.reasoning_content %}<think>
{{ m.reasoning_content }}
</think>

{% endif -%}
{{ m.content or '' }}TOOL_CALLS<|im_end|>
{% elif m.role == 'tool' -%}
<|im_start|>tool
<tool_response>
{{ m.content }}
</tool_response><|im_end|>
{% else -%}
<|im_start|>{{ m.role }}
{{ m.content }}<|im_end|>
{% endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}<|im_start|>assistant
{% endif -%}"""
SYSTEM_WITH_TOOLS = """{%- if tools -%}<|im_start|>system
You are an agent. Tools:
{% for t in tools %}{{ t | tojson }}
{% endfor %}<|im_end|>
{% endif -%}"""


def variant(header: str, reasoning_kept: str, args: str) -> str:
    body = BASE.replace("TOOL_CALLS", TOOL_CALLS.replace("ARGS", args))
    return body.replace("HEADER", header).replace("REASONING_KEPT", reasoning_kept)


AS_SAMPLED = "{{ call.function.arguments | tojson }}"
CLOCK = "<|im_start|>system\nNow: {{ strftime_now('%H:%M:%S.%f') }}<|im_end|>\n"
INJECTED = "{%- if tools -%}<|im_start|>system\nAlways call a tool first.<|im_end|>\n{% endif -%}"
VARIANTS = {
    # Qwen3-like: only the last assistant turn keeps its reasoning
    "reasoning dropped": variant(SYSTEM_WITH_TOOLS, "loop.index0 == last_assistant.i", AS_SAMPLED),
    # a header with the time of rendering (Llama 3-style date headers), different on every call
    "clock header": variant(CLOCK + SYSTEM_WITH_TOOLS, "true", AS_SAMPLED),
    # arguments parsed and dumped again with indentation
    "arguments re-serialized": variant(
        SYSTEM_WITH_TOOLS, "true", "{{ call.function.arguments | tojson(indent=1) }}"
    ),
    # a fixed instruction injected whenever tools are offered
    "system injected": variant(INJECTED + SYSTEM_WITH_TOOLS, "true", AS_SAMPLED),
}
TOOLS = [{"type": "function", "function": {"name": "python", "parameters": {"type": "object"}}}]
QUESTION = [{"role": "user", "content": "Compute 3 + 4, then times 5."}]


def tokenizer_with(template: str) -> ChatTokenizer:
    hf = copy.deepcopy(ChatTokenizer.load().hf)
    hf.chat_template = template
    return HFChatTokenizer(hf, "farm-tiny-variant")


def sampled_turn(tokenizer: ChatTokenizer, reasoning: str, code: str) -> tuple[Generation, dict[str, Any]]:
    call = json.dumps({"name": "python", "arguments": {"z": 1, "code": code}})
    text = f"<think>\n{reasoning}\n</think>\n\n<tool_call>\n{call}\n</tool_call><|im_end|>"
    ids = tokenizer.encode(text)
    parsed = parse_assistant(text, tokenizer.eot_token)
    message = {
        "role": "assistant",
        "content": parsed.content,
        "reasoning_content": parsed.reasoning,
        "tool_calls": [c.to_openai() for c in parsed.tool_calls],
    }
    return Generation(token_ids=ids, logprobs=[-0.5] * len(ids), finish_reason="stop"), message


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_a_rollout_continues_and_keeps_every_sampled_token(name: str) -> None:
    tokenizer = tokenizer_with(VARIANTS[name])
    conv = TokenConversation(tokenizer, QUESTION, TOOLS)
    expected: list[int] = []
    for reasoning, code, result in [("Add.", "print(3 + 4)", "7"), ("Multiply.", "print(7 * 5)", "35")]:
        generation, message = sampled_turn(tokenizer, reasoning, code)
        assert message["tool_calls"][0]["function"]["name"] == "python"
        expected += generation.token_ids
        conv.add_sampled(generation, message)
        conv.add_messages([{"role": "tool", "content": result}])
    trace = conv.to_trace("stop", {})
    assert [t for t, m in zip(trace.response_ids, trace.loss_mask, strict=True) if m] == expected
    text = tokenizer.decode(trace.response_ids)
    assert text.count("<tool_response>\n7\n</tool_response>") == 1 and "35" in text
    assert text.endswith("<|im_start|>assistant\n")
    # the farm's context is not what a re-render of the same history gives: re-rendering would break
    rerendered = tokenizer.render([*QUESTION, *conv.messages[1:]], TOOLS, add_generation_prompt=True)
    if name != "system injected":  # that variant alone rewrites nothing in earlier turns
        assert tokenizer.decode(trace.prompt_ids + trace.response_ids) != rerendered


texts = st.text(
    alphabet=st.characters(codec="utf-8", exclude_categories=["Cs", "Cc"]), min_size=1, max_size=30
)


@settings(max_examples=25, deadline=None)
@given(name=st.sampled_from(sorted(VARIANTS)), results=st.lists(texts, min_size=1, max_size=4))
def test_invariant_holds_whatever_the_tool_results(name: str, results: list[str]) -> None:
    tokenizer = tokenizer_with(VARIANTS[name])
    conv = TokenConversation(tokenizer, QUESTION, TOOLS)
    generation, message = sampled_turn(tokenizer, "Think.", "print(1)")
    conv.add_sampled(generation, message)
    conv.add_messages([{"role": "tool", "content": r} for r in results])
    trace = conv.to_trace("stop", {})
    assert [t for t, m in zip(trace.response_ids, trace.loss_mask, strict=True) if m] == generation.token_ids
    assert trace.response_ids[: len(generation.token_ids)] == generation.token_ids
