"""GLM-4.5 / 4.6 (zai-org/GLM-4.6's template over Qwen3's vocabulary with GLM's tokens, see
tests/templates/families.py), whose template closes no assistant turn with a token of its own: the turn
ends where `<|user|>` or `<|observation|>` opens the next message. The servers stop on those tokens (GLM's
generation_config lists them as eos ids; vLLM adds such ids to stop_token_ids, vllm/sampling_params.py
update_from_generation_config @00388f65; llama.cpp marks `<|user|>` GLM's end-of-turn token,
conversion/glm.py in the llama-cpp-python 0.3.36 sdist) and keep the one sampled in the turn's ids. So
the farm appends the next message without the opening token the model already sampled, and with it
after a turn that was cut or closed by another one; the token invariant holds either way.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from farm.agent.conversation import TokenConversation
from farm.chat.tokenizer import ChatTokenizer
from farm.inference.generation import Generation
from farm.llm.prompts import read_prompt
from farm.llm.sampling import SamplingRequest, StopChecker
from tests.templates.families import family_tokenizer_dir
from tests.templates.invariant import assert_invariant

TYPED = {
    "type": "object",
    "properties": {"code": {"type": "string"}, "x": {"type": "integer"}},
}
"""GLM writes a string argument bare (`<arg_value>12</arg_value>`): its schema types it back."""
TOOLS = [{"type": "function", "function": {"name": n, "parameters": TYPED}} for n in ("python", "finish")]
words = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyz ABC0123456789.,:;!?+-*/=()_é漢\n", min_size=1, max_size=24
)
arguments = st.fixed_dictionaries({}, optional={"code": words, "x": st.integers(-999, 999)})
turn = st.fixed_dictionaries(
    {
        "content": words,
        "reasoning": st.one_of(st.none(), words),
        "calls": st.lists(st.tuples(st.sampled_from(["python", "finish"]), arguments), max_size=2),
        "reply": st.lists(words, min_size=1, max_size=2),
        "end": st.sampled_from(["own", "cut", "other"]),
    }
)


@pytest.fixture(scope="module")
def glm(tmp_path_factory: pytest.TempPathFactory) -> ChatTokenizer:
    return ChatTokenizer.load(str(family_tokenizer_dir("glm-4.6", tmp_path_factory.mktemp("glm"))))


def test_the_template_is_read_as_closed_by_the_next_role(glm: ChatTokenizer) -> None:
    assert (glm.family, glm.tool_parser, glm.eot_token) == ("glm", "glm45", "<|endoftext|>")
    assert glm.closers == {"user": "<|user|>", "tool": "<|observation|>"}
    assert {glm.decode([i]) for i in glm.turn_end_ids()} == {"<|endoftext|>", "<|user|>", "<|observation|>"}
    call = {"role": "assistant", "content": "", "tool_calls": [_call("python", {"code": "print(1)"})]}
    assert glm.assistant_text(call).endswith("</arg_value>\n</tool_call><|observation|>")
    assert glm.assistant_text({"role": "assistant", "content": "4"}) == "\n<think></think>\n4<|user|>"


def test_the_next_message_follows_without_the_sampled_opener(glm: ChatTokenizer) -> None:
    result = [{"role": "tool", "content": "4"}]
    observation, user = glm.encode("<|observation|>")[0], glm.encode("<|user|>")[0]
    after = "\n<tool_response>\n4\n</tool_response><|assistant|>"
    assert glm.decode(glm.ids_after_turn(observation, result, TOOLS)) == after
    # cut by max_tokens, or closed by another role's token: the result opens as the template opens it
    assert glm.decode(glm.ids_after_turn(glm.encode("x")[0], result, TOOLS)) == "<|observation|>" + after
    assert glm.decode(glm.ids_after_turn(user, result, TOOLS)) == "<|observation|>" + after
    feedback = [{"role": "user", "content": "go on"}]
    assert glm.decode(glm.ids_after_turn(user, feedback, TOOLS)) == "\ngo on<|assistant|>"


def test_the_server_stops_on_the_next_role_token_and_keeps_it(glm: ChatTokenizer) -> None:
    text = glm.assistant_text({"role": "assistant", "content": "", "tool_calls": [_call("python", {"x": 2})]})
    checker = StopChecker(glm, SamplingRequest(max_tokens=500))
    ids = glm.encode(text + "never sampled")
    done = next(i for i, token in enumerate(ids) if checker.feed(token, 0.0))
    assert glm.decode(checker.sample.token_ids) == text and done == len(glm.encode(text)) - 1
    observation = glm.encode("<|observation|>")[0]
    assert (checker.sample.finish_reason, checker.sample.stop_reason) == ("stop", observation)
    ignoring = StopChecker(glm, SamplingRequest(max_tokens=500, ignore_eos=True))
    assert not any(ignoring.feed(token, 0.0) for token in glm.encode(text))


def test_the_published_tool_call_parses_with_its_schema_types(glm: ChatTokenizer) -> None:
    calls = [_call("python", {"code": "12", "x": 7})]
    text = glm.assistant_text({"role": "assistant", "content": "Let me run it.", "tool_calls": calls})
    parsed = glm.parse_assistant(text, tools=TOOLS)
    assert parsed.content == "Let me run it." and parsed.errors == []
    assert [(c.name, c.arguments) for c in parsed.tool_calls] == [("python", {"code": "12", "x": 7})]


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(plans=st.lists(turn, min_size=1, max_size=3), question=words)
def test_invariant_over_message_sequences_however_a_turn_ends(
    glm: ChatTokenizer, plans: list[dict[str, Any]], question: str
) -> None:
    conv = TokenConversation(glm, [{"role": "user", "content": question}], TOOLS)
    sampled_ids: list[int] = []
    for i, plan in enumerate(plans):
        message: dict[str, Any] = {"role": "assistant", "content": plan["content"]}
        if plan["reasoning"] is not None:
            message["reasoning_content"] = plan["reasoning"]
        if plan["calls"]:
            message["tool_calls"] = [_call(n, a) for n, a in plan["calls"]]
        ids = glm.encode(glm.assistant_text(message))
        if plan["end"] == "cut":
            ids = ids[: max(1, len(ids) // 2)]
        elif plan["end"] == "other":  # the model closed its turn with the other role's token
            other = glm.closers["user" if plan["calls"] else "tool"]
            ids = [*ids[:-1], *glm.encode(other)]
        parsed = glm.parse_assistant(glm.decode(ids), tools=TOOLS)
        if plan["end"] != "cut":
            assert [(c.name, c.arguments) for c in parsed.tool_calls] == plan["calls"], glm.decode(ids)
        recorded: dict[str, Any] = {"role": "assistant", "content": parsed.content}
        if parsed.tool_calls:
            recorded["tool_calls"] = [c.to_openai() for c in parsed.tool_calls]
        finish = "length" if plan["end"] == "cut" else "stop"
        generation = Generation(token_ids=ids, logprobs=[-0.5] * len(ids), finish_reason=finish)
        conv.add_sampled(generation, recorded)
        sampled_ids += ids
        if i + 1 < len(plans):
            conv.add_messages(_replies(plan["reply"], parsed.tool_calls))
    trace = conv.to_trace("stop", {})
    assert [t for t, m in zip(trace.response_ids, trace.loss_mask, strict=True) if m] == sampled_ids
    assert_invariant(trace, glm)
    # what the reference LLM reads back: the same roles and calls, and the open generation turn (GLM's
    # template takes arguments as objects only, as a client sends them, not as OpenAI's JSON text)
    history = [_with_object_arguments(m) for m in (*trace.prompt_messages, *trace.response_messages)]
    read = read_prompt(glm, glm.render(history, TOOLS, add_generation_prompt=True))
    assert [m["role"] for m in read.messages] == [m["role"] for m in history]
    assert read.open_role == "assistant"
    assert [t["function"]["name"] for t in read.tools] == ["python", "finish"]
    for want, seen in zip(history, read.messages, strict=True):
        assert [json.loads(c["function"]["arguments"]) for c in seen.get("tool_calls", [])] == [
            c["function"]["arguments"] for c in want.get("tool_calls", [])
        ]


def _call(name: str, arguments: dict[str, Any]) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


def _with_object_arguments(message: dict[str, Any]) -> dict[str, Any]:
    calls = [
        {**c, "function": {**c["function"], "arguments": json.loads(c["function"]["arguments"])}}
        for c in message.get("tool_calls", [])
    ]
    return {**message, "tool_calls": calls} if calls else message


def _replies(texts: list[str], calls: list) -> list[dict[str, Any]]:
    if not calls:
        return [{"role": "user", "content": texts[0]}]
    return [
        {"role": "tool", "tool_call_id": c.id, "name": c.name, "content": t}
        for c, t in zip(calls, texts, strict=False)
    ]
