"""Gemma 3 rendered exactly as its published template renders it, and any template the farm cannot render
so refused at load (farm/chat/probe.py).

What the issue measured against a real vLLM serving Gemma 3 270M: tool results sent as `role: tool`
(the template refuses them), `<eos>` taken for the turn end where Gemma ends turns with `<end_of_turn>`,
an extra `<eos>` after each turn, the base conversation left in every continuation (1,173 tokens where
vLLM rendered 910) and `assistant_text` raising. Each is a test here, over Gemma 3's own vocabulary (the
GGUF of Gemma 3 270M from PyPI, slow) and a stand-in with Gemma's control tokens (default run); see
tests/templates/gemma3.py.
"""

from __future__ import annotations

import copy
import functools
import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from transformers import PreTrainedTokenizerFast

from farm.agent.conversation import TokenConversation
from farm.chat.probe import TemplateRefused, check_rendering, family_label
from farm.chat.tokenizer import SHIPPED_DIR, ChatTokenizer, HFChatTokenizer
from farm.inference.generation import Generation
from farm.llm.prompts import read_prompt
from tests.templates.gemma3 import GemmaUnavailable, real_gemma3_dir, stand_in_gemma3
from tests.templates.invariant import as_sampled

TOOLS = [
    {
        "type": "function",
        "function": {"name": n, "description": f"the {n} tool", "parameters": {"type": "object"}},
    }
    for n in ("python", "bash")
]


@pytest.fixture(scope="module", params=["stand-in", pytest.param("real", marks=pytest.mark.slow)])
def gemma(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> ChatTokenizer:
    if request.param == "stand-in":
        tokenizer = stand_in_gemma3()
        check_rendering(tokenizer)  # what ChatTokenizer.load runs (a directory: test_gemma3_farm.py)
        return tokenizer
    try:
        return ChatTokenizer.load(str(real_gemma3_dir()))
    except (GemmaUnavailable, ImportError) as exc:
        pytest.skip(f"Gemma 3's GGUF is not available: {exc}")


def ids(tokenizer: ChatTokenizer, token: str) -> int:
    (found,) = tokenizer.encode(token)
    return found


def test_gemma3_is_a_family_with_its_own_turn_end_and_no_tool_role(gemma: ChatTokenizer) -> None:
    end_of_turn, eos = ids(gemma, "<end_of_turn>"), ids(gemma, "<eos>")
    assert gemma.family == "gemma" and gemma.tool_parser == "pythonic"
    assert gemma.hf.eos_token == "<eos>"  # what the issue's farm took for the turn end
    assert (gemma.eot_token, gemma.eos_token_id) == ("<end_of_turn>", end_of_turn)
    assert gemma.generation_end_ids == {eos, end_of_turn} == gemma.turn_end_ids()
    assert (gemma.tool_role, gemma.joins_user_turns, gemma.calls_format) == ("user", True, "pythonic")
    assert gemma.closers == {} and check_rendering(gemma).notes[0].startswith("the template renders")


def test_assistant_text_and_continuation_ids_are_the_templates(gemma: ChatTokenizer) -> None:
    # `assistant_text` raised ValueError (substring not found) with <eos> as the turn end
    assert gemma.assistant_text({"role": "assistant", "content": " Four. "}) == "Four.<end_of_turn>"
    call = {"type": "function", "function": {"name": "python", "arguments": '{"code": "print(2)"}'}}
    said = gemma.assistant_text({"role": "assistant", "content": "", "tool_calls": [call]})
    assert said == '[python(code="print(2)")]<end_of_turn>'
    assert gemma.parse_assistant(said).tool_calls[0].arguments == {"code": "print(2)"}
    # the continuation holds the new turn only, not the base conversation it was rendered after
    follow = "\n<start_of_turn>user\nAnd 3?<end_of_turn>\n<start_of_turn>model\n"
    assert gemma.continuation_ids([{"role": "user", "content": "And 3?"}]) == gemma.encode(follow)
    end_of_turn, eos = ids(gemma, "<end_of_turn>"), ids(gemma, "<eos>")
    new = [{"role": "user", "content": "And 3?"}]
    assert gemma.ids_after_turn(end_of_turn, new) == gemma.encode(follow)  # no <eos> added
    assert gemma.ids_after_turn(eos, new) == gemma.encode(follow)  # a turn the server stopped on <eos>
    cut = gemma.ids_after_turn(gemma.encode("Fo")[-1], new)  # cut by max_tokens: closed as the template
    assert cut == [end_of_turn, *gemma.encode(follow)]


def test_tool_results_go_as_one_user_turn_the_template_takes(gemma: ChatTokenizer) -> None:
    replies = [
        {"role": "tool", "tool_call_id": "a", "name": "python", "content": "4\n"},
        {"role": "tool", "tool_call_id": "b", "name": "bash", "content": "ok"},
        {"role": "user", "content": "[1 turn(s) left; give your final answer soon]"},
    ]
    (turn,) = gemma.template_messages(replies)
    assert turn == {
        "role": "user",
        "content": "<tool_response>\n4\n\n</tool_response>\n<tool_response>\nok\n</tool_response>\n"
        "[1 turn(s) left; give your final answer soon]",
    }
    with pytest.raises(Exception, match="Conversation roles must alternate"):
        gemma.render([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}, replies[0]])
    read = read_prompt(
        gemma, gemma.render([{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"}, turn])
    )
    assert [m["role"] for m in read.messages] == ["user", "assistant", "tool", "tool", "user"]
    assert read.messages[2]["content"] == "4\n"


words = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyz ABCXYZ0123456789.,:;!?+-*/=()_é漢\n", min_size=1, max_size=24
)
arguments = st.dictionaries(
    st.sampled_from(["code", "command", "x"]), st.one_of(words, st.integers(-99, 99)), max_size=2
)
plan = st.fixed_dictionaries(
    {
        "content": words,
        "calls": st.lists(st.tuples(st.sampled_from(["python", "bash"]), arguments), max_size=2),
        "replies": st.lists(words, min_size=1, max_size=3),
        "cut": st.booleans(),
    }
)


@settings(
    max_examples=25,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(plans=st.lists(plan, min_size=1, max_size=4), question=words, system=st.one_of(st.none(), words))
@example(
    plans=[{"content": "x", "calls": [("python", {"code": "1"})], "replies": ["a", "b"], "cut": False}] * 3,
    question="q",
    system="s",
)
@example(plans=[{"content": " ", "calls": [], "replies": ["a"], "cut": True}] * 2, question="q", system=None)
def test_the_farms_context_is_the_templates_rendering_at_every_turn(
    gemma: ChatTokenizer, plans: list[dict[str, Any]], question: str, system: str | None
) -> None:
    """A multi-turn tool conversation built as the agent loop builds it (results as `role: tool`, a hint
    after them, turns cut by max_tokens): at every generation point the farm's ids are exactly the
    template's rendering of the conversation as sampled, and nothing between turns is the farm's own."""
    prompt = [{"role": "system", "content": system}] if system else []
    conv = TokenConversation(gemma, [*prompt, {"role": "user", "content": question}], TOOLS)
    for i, step in enumerate(plans):
        message: dict[str, Any] = {"role": "assistant", "content": step["content"]}
        if step["calls"]:
            message["tool_calls"] = [
                {"type": "function", "function": {"name": n, "arguments": json.dumps(a)}}
                for n, a in step["calls"]
            ]
        sampled = gemma.encode(gemma.assistant_text(message))
        if step["cut"] and len(sampled) > 1:  # (a turn of whitespace renders as its turn end alone)
            sampled = sampled[:-1]
        parsed = gemma.parse_assistant(gemma.decode(sampled), tools=TOOLS)
        assert [(c.name, c.arguments) for c in parsed.tool_calls] == step["calls"]
        conv.add_sampled(
            Generation(token_ids=sampled, logprobs=[-0.5] * len(sampled), finish_reason="stop"),
            parsed.message(),
        )
        if i + 1 < len(plans):
            replies: list[dict[str, Any]] = [
                {"role": "tool", "tool_call_id": c.id, "name": c.name, "content": text}
                for c, text in zip(parsed.tool_calls, step["replies"], strict=False)
            ]
            conv.add_messages([*replies, {"role": "user", "content": step["replies"][-1]}])
    trace = conv.to_trace("stop", {})
    eos = ids(gemma, "<eos>")
    assert eos not in trace.response_ids and gemma.decode(trace.response_ids).count("<bos>") == 0
    context = trace.prompt_ids + trace.response_ids
    for start, messages in as_sampled(trace, gemma):
        rendered = gemma.apply_chat_template(messages, TOOLS, add_generation_prompt=True)
        assert context[: len(trace.prompt_ids) + start] == rendered, gemma.decode(rendered)


def test_the_issues_conversation_has_the_templates_length(gemma: ChatTokenizer) -> None:
    """The issue's count: the farm's context of a three-turn conversation is the template's rendering of it,
    token for token (the old farm's was 263 tokens longer for 910)."""
    conv = TokenConversation(gemma, [{"role": "user", "content": "What is 84 * 76 + 123?"}], TOOLS)
    call = {"type": "function", "function": {"name": "python", "arguments": {"code": "print(84 * 76 + 123)"}}}
    turns = [
        (
            {"role": "assistant", "content": "", "tool_calls": [call]},
            [{"role": "tool", "tool_call_id": "x", "content": "6507"}],
        ),
        ({"role": "assistant", "content": "It printed 6507."}, [{"role": "user", "content": "Sure?"}]),
        ({"role": "assistant", "content": "The answer is \\boxed{6507}."}, []),
    ]
    history: list[dict[str, Any]] = list(conv.messages)
    for message, replies in turns:
        text = gemma.assistant_text(message)
        sampled = gemma.encode(text)
        conv.add_sampled(
            Generation(token_ids=sampled, logprobs=[0.0] * len(sampled), finish_reason="stop"), message
        )
        history.append({"role": "assistant", "content": text.removesuffix("<end_of_turn>")})
        if replies:
            conv.add_messages(replies)
            history += gemma.template_messages(replies)
    closed = gemma.apply_chat_template(history, TOOLS, add_generation_prompt=False)
    assert (
        conv.context_ids == closed[: len(conv.context_ids)]
        and gemma.decode(closed[len(conv.context_ids) :]) == "\n"
    )


BROKEN = {
    "numbers its turns": (
        "{{ bos_token }}{% for m in messages %}<start_of_turn>{{ m.role }} {{ loop.index }}\n"
        "{{ m.content }}<end_of_turn>\n{% endfor %}"
        "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}",
        "what the farm appended after the last sampled turn differs from the template's rendering",
    ),
    "closes turns with plain text": (
        "{% for m in messages %}{{ m.role }}: {{ m.content }}\n### end\n{% endfor %}"
        "{% if add_generation_prompt %}assistant: {% endif %}",
        "the template closes an assistant turn with no special token, and not with the tokenizer's eos",
    ),
    "ends a turn otherwise once it is history": (
        "{{ bos_token }}{% for m in messages %}<start_of_turn>{{ m.role }}\n{{ m.content }}"
        "{% if m.role == 'assistant' and not loop.last %}<bos>{% else %}<end_of_turn>{% endif %}\n"
        "{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}",
        "lacks the messages",
    ),
}


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_a_template_the_farm_cannot_render_is_refused_naming_what_is_missing(
    name: str, gemma: ChatTokenizer
) -> None:
    template, missing = BROKEN[name]
    broken = HFChatTokenizer(gemma.hf, f"broken/{name}", template)
    with pytest.raises(
        TemplateRefused, match="the farm cannot render conversations as its chat template does"
    ) as refused:
        check_rendering(broken)
    assert missing in str(refused.value) and f"'broken/{name}'" in str(refused.value)
    assert "family " in str(refused.value) and "turn end" in str(refused.value)


def test_the_model_must_stop_on_the_templates_turn_end(gemma: ChatTokenizer) -> None:
    """A generation config that stops only on <eos> (Gemma 3's base model's): the server would run past
    <end_of_turn>; refused, naming the ids."""
    only_eos = HFChatTokenizer(gemma.hf, "gemma-base-config", gemma.chat_template, [ids(gemma, "<eos>")])
    with pytest.raises(
        TemplateRefused, match=r"family gemma, turn end '<end_of_turn>'.*stops on ids \[1?\d*\]"
    ):
        check_rendering(only_eos)


def tiny_with(tokens: list[str]) -> PreTrainedTokenizerFast:
    """The shipped farm-tiny vocabulary (small: quick to copy) with `tokens` added as special."""
    hf = copy.deepcopy(_tiny())
    hf.add_special_tokens({"additional_special_tokens": tokens})  # type: ignore[dict-item]
    return hf


@functools.cache
def _tiny() -> PreTrainedTokenizerFast:
    return PreTrainedTokenizerFast.from_pretrained(str(SHIPPED_DIR), local_files_only=True)


def test_load_refuses_a_directory_once_and_for_every_job(tmp_path: Path) -> None:
    out = tmp_path / "broken"
    hf = tiny_with(["<bos>", "<start_of_turn>", "<end_of_turn>"])
    hf.chat_template = BROKEN["numbers its turns"][0]
    hf.save_pretrained(str(out))
    for _ in range(2):  # remembered: every job of the worker fails with the same message, fast
        with pytest.raises(TemplateRefused, match="'broken'"):
            ChatTokenizer.load(str(out))


UNKNOWN = (
    "{%- for m in messages -%}{{- '<|turn|>' + m.role + '\\n' + m.content -}}"
    "{%- if m.role == 'assistant' -%}{{- '<|done|>' -}}{%- else -%}{{- '<|end|>' -}}{%- endif -%}"
    "{{- '\\n' -}}"
    "{%- endfor -%}{%- if add_generation_prompt -%}{{- '<|turn|>assistant\\n' -}}{%- endif -%}"
)


def test_an_unknown_family_gets_its_turn_end_from_its_template() -> None:
    """A template of no family the farm knows, ending assistant turns with a token of its own: the farm
    takes that token as the turn end (not eos) and renders what follows a turn exactly."""
    hf = tiny_with(["<|turn|>", "<|done|>", "<|end|>"])
    unknown = HFChatTokenizer(hf, "unknown", UNKNOWN)
    assert unknown.eot_token == "<|done|>" and unknown.tool_role == "tool"
    check_rendering(
        unknown
    )  # passes: only its sampled tool-call turns are rendered otherwise (it drops calls)
    assert "turn end '<|done|>'" in family_label(unknown) and unknown.calls_format == unknown.tool_parser
    follow = "\n<|turn|>user\nok<|end|>\n<|turn|>assistant\n"
    assert unknown.continuation_ids([{"role": "user", "content": "ok"}]) == unknown.encode(follow)
    assert unknown.assistant_text({"role": "assistant", "content": "hi"}) == "hi<|done|>"
