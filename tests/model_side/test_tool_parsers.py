"""Conformance of the farm's tool-call parsers (farm/chat/tool_parsers.py) with the inference servers'
own, case by case: the same sampled text gives the same calls, names and arguments.

The cases are written here from reading the servers' parsers and their tests (nothing copied):
- vLLM (vllm-project/vllm): vllm/frontend/processing/tool_parsers/llama_tool_parser.py and
  pythonic_tool_parser.py @ 055e47c28003156421365af985d676fc921cb075 (llama3_json reads every `{` with
  a JSON decoder, `arguments` or `parameters`; pythonic is a Python list of calls read with `ast`);
  tests/tool_parsers/test_llama3_json_tool_parser.py @ 1e499e36c5828a75c6ca8b76631d264be1187005
  (text around the call, `;`-separated calls, nesting, braces in strings and in trailing prose).
- SGLang (sgl-project/sglang), python/sglang/srt/function_call/: qwen3_coder_detector.py @
  048a57e8f7b08b14834e7399db9ec18849ee8745 (`<function=...>`/`<parameter=...>`, one newline trimmed
  each side of a value, typed by the tool's schema, `null` is None); glm4_moe_detector.py @
  02911a07fb722f48336cdd3b3a40e8928acb664c (`<arg_key>`/`<arg_value>`, JSON values parsed, string
  parameters keep bare scalars' text); kimik2_detector.py @ 0351c1fafe4c53c91c331dea205af48b018af559
  (`functions.NAME:N` ids, text before the section); llama32_detector.py @
  01c3e4388c59df40393699f746bdb73470520974 (`<|python_tag|>` before the JSON).
- DeepSeek V3 / V3.1, Mistral, Hermes: the formats of farm/chat/families/ and tool_calls.py.

Where the farm departs from a server on purpose, the case says so: a call that looks like one but does
not parse is an error fed back to the model (vLLM returns such text as the answer), never silence.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import given, settings

from farm.chat.families import ALIASES, FORMATS, PARSER_NAMES, detect, resolve_parser
from farm.chat.families.deepseek import ds_token
from farm.chat.tool_parsers import parse_with
from tests.model_side.strategies import arguments

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "search",
            "parameters": {
                "type": "object",
                "properties": {
                    "query": {"type": "string"},
                    "limit": {"type": "integer"},
                    "ratio": {"type": "number"},
                    "exact": {"type": "boolean"},
                    "filters": {"type": "object"},
                    "tags": {"type": "array"},
                },
            },
        },
    },
    {
        "type": "function",
        "function": {"name": "python", "parameters": {"properties": {"code": {"type": "string"}}}},
    },
]
DS = {
    n: ds_token(n)
    for n in ("tool_calls_begin", "tool_calls_end", "tool_call_begin", "tool_call_end", "tool_sep")
}
K_SEC, K_SEC_END = "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"
K_CALL, K_ARGS, K_END = "<|tool_call_begin|>", "<|tool_call_argument_begin|>", "<|tool_call_end|>"


def ds_v3(name: str, args: str) -> str:
    return f"{DS['tool_call_begin']}function{DS['tool_sep']}{name}\n```json\n{args}\n```{DS['tool_call_end']}"


def ds_v31(name: str, args: str) -> str:
    return f"{DS['tool_call_begin']}{name}{DS['tool_sep']}{args}{DS['tool_call_end']}"


def kimi(name: str, index: int, args: str) -> str:
    return f"{K_CALL}functions.{name}:{index}{K_ARGS}{args}{K_END}"


Call = tuple[str, dict[str, Any]]
CASES: list[tuple[str, str, str, list[Call]]] = [
    # (parser, sampled text, content left, calls)
    (
        "hermes",
        'Let me look.\n<tool_call>\n{"name": "search", "arguments": {"query": "été"}}\n</tool_call>',
        "Let me look.",
        [("search", {"query": "été"})],
    ),
    (
        "hermes",
        '<tool_call>\n{"name": "search", "arguments": {"filters": {"a": {"b": [1, 2]}}}}\n</tool_call>\n'
        '<tool_call>\n{"name": "python", "arguments": {"code": "print(\\"}\\")"}}\n</tool_call>',
        "",
        [("search", {"filters": {"a": {"b": [1, 2]}}}), ("python", {"code": 'print("}")'})],
    ),
    (
        "qwen3_coder",
        "I'll search.\n<tool_call>\n<function=search>\n<parameter=query>\n東京 weather\n</parameter>\n"
        "<parameter=limit>\n5\n</parameter>\n<parameter=ratio>\n2\n</parameter>\n<parameter=exact>\nTrue\n</parameter>\n"
        '<parameter=filters>\n{"day": {"from": 1}}\n</parameter>\n</function>\n</tool_call>',
        "I'll search.",
        [
            (
                "search",
                {
                    "query": "東京 weather",
                    "limit": 5,
                    "ratio": 2,
                    "exact": True,
                    "filters": {"day": {"from": 1}},
                },
            )
        ],
    ),
    (
        "qwen3_coder",
        "<tool_call>\n<function=python>\n<parameter=code>\nx = 1\n\nprint(x)\n</parameter>\n</function>\n"
        "</tool_call>\n<tool_call>\n<function=search>\n<parameter=query>\nnull\n</parameter>\n<parameter=extra>\n7\n"
        "</parameter>\n<parameter=ratio>\n1.5e2\n</parameter>\n</function>\n</tool_call>",
        "",
        [
            ("python", {"code": "x = 1\n\nprint(x)"}),
            ("search", {"query": None, "extra": "7", "ratio": 150.0}),
        ],
    ),
    (
        "llama3_json",
        'Here is the result: {"name": "search", "parameters": {}} Want more?',
        "Here is the result:  Want more?",
        [("search", {})],
    ),
    (
        "llama3_json",
        '{"name": "search", "parameters": {"query": "a {b} [c]"}}; {"name": "python", '
        '"arguments": {"code": "d = {\\"k\\": 1}"}}; '
        '{"name": "search", "parameters": {"filters": {"x": {"y": {"z": 1}}}}}',
        "",
        [
            ("search", {"query": "a {b} [c]"}),
            ("python", {"code": 'd = {"k": 1}'}),
            ("search", {"filters": {"x": {"y": {"z": 1}}}}),
        ],
    ),
    (
        "llama3_json",
        '<|python_tag|>{"name": "search", "parameters": {"query": "ünï"}}<|eom_id|>',
        "",
        [("search", {"query": "ünï"})],
    ),
    (
        "llama3_json",
        '{"name": "search", "parameters": {"query": "q"}} The arguments were {"query": "q"}',
        'The arguments were {"query": "q"}',
        [("search", {"query": "q"})],
    ),
    ("llama3_json", '{"name": "search"}', '{"name": "search"}', []),
    (
        "llama3_json",
        '<|python_tag|>brave_search.call(query="Menlo Park")',
        "",
        [("brave_search", {"query": "Menlo Park"})],
    ),
    (
        "pythonic",
        '[search(query="Zürich", limit=3), python(code=\'print("[x]")\')]',
        "",
        [("search", {"query": "Zürich", "limit": 3}), ("python", {"code": 'print("[x]")'})],
    ),
    (
        "pythonic",
        'Sure.\n[search(filters={"a": [1, {"b": None}]}, exact=True)]',
        "Sure.",
        [("search", {"filters": {"a": [1, {"b": None}]}, "exact": True})],
    ),
    ("pythonic", "<|python_start|>[search()]<|python_end|>", "", [("search", {})]),
    (
        "mistral",
        'Sure[TOOL_CALLS][{"name": "search", "arguments": {"query": "日本"}}, '
        '{"name": "python", "arguments": {"code": "1"}}]',
        "Sure",
        [("search", {"query": "日本"}), ("python", {"code": "1"})],
    ),
    (
        "mistral",
        '[TOOL_CALLS]search[ARGS]{"filters": {"a": {"b": 1}}}[TOOL_CALLS]python[ARGS]{"code": "2"}',
        "",
        [("search", {"filters": {"a": {"b": 1}}}), ("python", {"code": "2"})],
    ),
    (
        "deepseek_v3",
        "Checking."
        + DS["tool_calls_begin"]
        + ds_v3("search", '{"query": "ß"}')
        + "\n"
        + ds_v3("python", '{"code": "print({1: 2})"}')
        + DS["tool_calls_end"],
        "Checking.",
        [("search", {"query": "ß"}), ("python", {"code": "print({1: 2})"})],
    ),
    (
        "deepseek_v31",
        "Checking."
        + DS["tool_calls_begin"]
        + ds_v31("search", '{"filters": {"n": [1]}}')
        + ds_v31("python", '{"code": "é"}')
        + DS["tool_calls_end"],
        "Checking.",
        [("search", {"filters": {"n": [1]}}), ("python", {"code": "é"})],
    ),
    (
        "glm45",
        "Let me check.<tool_call>search\n<arg_key>query</arg_key>\n<arg_value>北京</arg_value>\n"
        "<arg_key>limit</arg_key>\n<arg_value>2</arg_value>\n<arg_key>filters</arg_key>\n"
        '<arg_value>{"date": {"from": "2024-06-27"}}</arg_value>\n</tool_call>',
        "Let me check.",
        [("search", {"query": "北京", "limit": 2, "filters": {"date": {"from": "2024-06-27"}}})],
    ),
    (
        "glm45",
        "<tool_call>search\n<arg_key>query</arg_key>\n<arg_value>123</arg_value>\n</tool_call>"
        "<tool_call>python\n<arg_key>code</arg_key>\n<arg_value>print(1)\nprint(2)</arg_value>\n</tool_call>",
        "",
        [("search", {"query": "123"}), ("python", {"code": "print(1)\nprint(2)"})],
    ),
    (
        "kimi_k2",
        "I'll run both."
        + K_SEC
        + kimi("search", 0, '{"query": "über"}')
        + kimi("python", 1, '{"code": "print(1)"}')
        + K_SEC_END,
        "I'll run both.",
        [("search", {"query": "über"}), ("python", {"code": "print(1)"})],
    ),
]


CALLING = [c for c in CASES if c[3]]


@pytest.mark.parametrize(("parser", "text", "content", "calls"), CALLING, ids=[c[0] for c in CALLING])
def test_the_same_text_gives_the_same_calls(parser: str, text: str, content: str, calls: list[Call]) -> None:
    parsed = parse_with(parser, text, "", TOOLS)
    assert parsed.errors == []
    assert [(c.name, c.arguments) for c in parsed.tool_calls] == calls
    assert parsed.content == content


def test_every_format_has_a_case() -> None:
    assert {c[0] for c in CASES} == set(PARSER_NAMES)


def test_kimi_keeps_its_call_ids() -> None:
    text = f"{K_SEC}{kimi('search', 0, '{}')}{kimi('search', 1, '{}')}{K_SEC_END}"
    assert [c.id for c in parse_with("kimi_k2", text, "").tool_calls] == [
        "functions.search:0",
        "functions.search:1",
    ]


BROKEN = [
    ("hermes", '<tool_call>\n{"name": "search", "arguments": {"query": }\n</tool_call>'),
    ("qwen3_coder", "<tool_call>\n<parameter=query>\nx\n</parameter>\n</tool_call>"),
    ("llama3_json", '{"name": "search", "parameters": {invalid json}'),
    ("pythonic", "[search(query='x'"),
    ("pythonic", "[search('positional')]"),
    ("mistral", "[TOOL_CALLS][{oops"),
    ("deepseek_v3", f"{DS['tool_calls_begin']}junk{DS['tool_calls_end']}"),
    ("deepseek_v31", f"{DS['tool_calls_begin']}{ds_v31('search', '{bad')}{DS['tool_calls_end']}"),
    ("glm45", "<tool_call>search\n<arg_key>query</arg_key>\n<arg_value>x</arg_value>"),
    ("kimi_k2", f"{K_SEC}{K_CALL}search{K_ARGS}{{}}{K_END}{K_SEC_END}"),
]


@pytest.mark.parametrize(("parser", "text"), BROKEN, ids=[f"{b[0]}-{i}" for i, b in enumerate(BROKEN)])
def test_a_call_that_does_not_parse_is_an_error_not_an_answer(parser: str, text: str) -> None:
    """vLLM hands such text back as the answer; the farm tells the model (farm/agent/loop.py)."""
    parsed = parse_with(parser, text, "", TOOLS)
    assert parsed.errors and not parsed.tool_calls


CALLING = [c for c in CASES if c[3]]


@pytest.mark.parametrize(("parser", "text", "content", "calls"), CALLING, ids=[c[0] for c in CALLING])
def test_a_call_in_another_format_is_an_error(
    parser: str, text: str, content: str, calls: list[Call]
) -> None:
    """Read by any parser whose format it is not, a call is either read to the same calls (formats that
    share a shape, e.g. JSON calls inside another format's tags) or reported, never an answer."""
    for other in PARSER_NAMES:
        if other == parser:
            continue
        parsed = parse_with(other, text, "", TOOLS)
        same = [(c.name, c.arguments) for c in parsed.tool_calls] == calls
        assert parsed.errors or (same and calls), (other, parsed)


def test_the_llama_31_failure_of_the_issue_is_no_longer_silent() -> None:
    """A Llama 3.1 model's own call read by the default (hermes) parser was the final answer."""
    for text in (
        '{"name": "python", "parameters": {"code": "print(2)"}}',
        "<|python_tag|>print(2)<|eom_id|>",
    ):
        parsed = parse_with("hermes", text, "<|eot_id|>")
        assert parsed.errors and "llama3_json" in parsed.errors[0]
    assert parse_with("llama3_json", "<|python_tag|>print(2)<|eom_id|>", "<|eot_id|>").tool_calls[0].name == (
        "code_interpreter"
    )


def test_reasoning_is_split_off_before_the_calls() -> None:
    for parser, text, _, calls in CASES[:1] + CASES[16:18]:
        parsed = parse_with(parser, f"<think>plan: 2 + 2 = 4</think>\n{text}", "", TOOLS)
        assert parsed.reasoning == "plan: 2 + 2 = 4"
        assert [(c.name, c.arguments) for c in parsed.tool_calls] == calls


def test_names_are_the_servers_and_aliases_resolve() -> None:
    assert set(PARSER_NAMES) == {
        "hermes", "qwen3_coder", "llama3_json", "pythonic", "mistral", "deepseek_v3", "deepseek_v31", "glm45",
        "kimi_k2",
    }  # fmt: skip
    for alias, name in ALIASES.items():
        assert resolve_parser(alias) == name
    assert resolve_parser(" Llama3_JSON ") == "llama3_json"
    with pytest.raises(ValueError, match="hermes"):
        resolve_parser("no_such_parser")
    assert all(f.hint for f in FORMATS.values())


def guess_parser(is_single_token: Callable[[str], bool], template: str | None = None) -> str:
    return detect(is_single_token, template)[1].name


def test_guess_from_vocabulary_and_template() -> None:
    def vocab(*tokens: str) -> Callable[[str], bool]:
        return lambda text: text in tokens

    assert guess_parser(vocab()) == "hermes"
    assert guess_parser(vocab("<|python_tag|>", "<|eom_id|>")) == "llama3_json"
    assert guess_parser(vocab("<|python_start|>", "<|python_tag|>")) == "pythonic"
    assert guess_parser(vocab(K_SEC)) == "kimi_k2"
    assert guess_parser(vocab("<arg_key>")) == "glm45"
    assert guess_parser(vocab("[TOOL_CALLS]")) == "mistral"
    assert guess_parser(vocab(DS["tool_calls_begin"])) == "deepseek_v3"
    assert (
        guess_parser(vocab(DS["tool_calls_begin"]), "{{'" + DS["tool_sep"] + "' + tool['name']}}")
        == "deepseek_v31"
    )
    assert guess_parser(vocab(), "<function={{ name }}>\n<parameter={{ key }}>") == "qwen3_coder"


@settings(max_examples=40, deadline=None)
@given(args=arguments)
def test_json_formats_round_trip_any_arguments(args: dict[str, Any]) -> None:
    encoded = json.dumps(args, ensure_ascii=False)
    texts = {
        "hermes": f'<tool_call>\n{{"name": "f", "arguments": {encoded}}}\n</tool_call>',
        "llama3_json": f'{{"name": "f", "parameters": {encoded}}}',
        "deepseek_v31": f"{DS['tool_calls_begin']}{ds_v31('f', encoded)}{DS['tool_calls_end']}",
        "kimi_k2": f"{K_SEC}{kimi('f', 0, encoded)}{K_SEC_END}",
        "mistral": f'[TOOL_CALLS][{{"name": "f", "arguments": {encoded}}}]',
    }
    for parser, text in texts.items():
        parsed = parse_with(parser, text, "")
        assert [(c.name, c.arguments) for c in parsed.tool_calls] == [("f", args)], parser
