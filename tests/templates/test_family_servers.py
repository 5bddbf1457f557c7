"""The reference LLM serving a Mistral tokenizer (mistral-common's encoding), a DeepSeek-layout template or
GLM-4.6's (whose turns end with the next role's token):
an OpenAI-SDK tool conversation gets its tool call back as OpenAI `tool_calls`, parsed from the family's
own format, and the answer after the tool result; /tokenize names the family's tokens. This is the path
the gateway records harness sessions through."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest
from openai import OpenAI

from farm.chat.families import family_named
from farm.chat.tokenizer import ChatTokenizer
from tests.model_side.conftest import ServerProcess
from tests.templates.families import family_tokenizer_dir
from tests.templates.variants import tokenizer_dir

pytestmark = pytest.mark.slow
CODE = {"type": "object", "properties": {"code": {"type": "string"}}}
PYTHON_TOOL = {"type": "function", "function": {"name": "python", "parameters": CODE}}


@pytest.fixture(
    scope="module", params=["mistral:v3-tekken", "deepseek/arguments re-serialized", "family:glm-4.6"]
)
def served(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple]:
    source: str = request.param
    if source.startswith("mistral:"):
        tokenizer = source
    elif source.startswith("family:"):  # GLM: the turn's closing <|observation|> / <|user|> is stripped
        tokenizer = str(family_tokenizer_dir(source.removeprefix("family:"), tmp_path_factory.mktemp("tok")))
    else:
        vocabulary, rewrite = source.split("/")
        tokenizer = str(tokenizer_dir(vocabulary, rewrite, tmp_path_factory.mktemp("tok")))
    server = ServerProcess(["--policy", "scripted", "--accuracy", "1.0", "--tokenizer", tokenizer])
    try:
        yield server.wait_ready(timeout=120), ChatTokenizer.load(tokenizer)
    finally:
        server.stop()


def test_tool_round_trip_in_the_family_format(served: tuple[ServerProcess, ChatTokenizer]) -> None:
    server, tokenizer = served
    client = OpenAI(base_url=server.address, api_key="unused", max_retries=0)
    model = client.models.list().data[0].id
    messages: list = [{"role": "user", "content": "What is 17 * 3 + 2?"}]
    first = client.chat.completions.create(
        model=model, messages=messages, tools=[PYTHON_TOOL], seed=4, extra_body={"return_token_ids": True}
    )
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls", choice
    call = choice.message.tool_calls[0]
    assert call.function.name == "python"
    assert json.loads(call.function.arguments) == {"code": "print(17 * 3 + 2)"}
    sampled = tokenizer.decode(choice.model_extra["token_ids"])
    marker = family_named(tokenizer.family).call_marker
    assert marker is not None and marker in sampled, sampled
    messages.append(choice.message.model_dump(exclude_none=True))
    messages.append({"role": "tool", "tool_call_id": call.id, "content": "53"})
    second = client.chat.completions.create(model=model, messages=messages, tools=[PYTHON_TOOL], seed=4)
    assert second.choices[0].finish_reason == "stop"
    assert second.choices[0].message.content == "The answer is \\boxed{53}."
    pieces = httpx.post(f"{server.root}/tokenize", json={"prompt": marker, "return_token_strs": True}).json()
    assert pieces["count"] == 1 and pieces["token_strs"] == [marker]


def test_a_streamed_call_is_held_back_from_the_content(served: tuple[ServerProcess, ChatTokenizer]) -> None:
    """Streamed, the family's call text never reaches the content deltas: it comes as tool calls in the
    finish chunk (before, only Hermes' `<tool_call>` was held back and a Mistral or DeepSeek stream sent
    its call's raw text as content too)."""
    server, tokenizer = served
    client = OpenAI(base_url=server.address, api_key="unused", max_retries=0)
    model = client.models.list().data[0].id
    stream = client.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": "What is 17 * 3 + 2?"}],
        tools=[PYTHON_TOOL],
        seed=4,
        stream=True,
    )
    content, calls, finish = "", [], None
    for chunk in stream:
        for c in chunk.choices:
            content += c.delta.content or ""
            calls += c.delta.tool_calls or []
            finish = c.finish_reason or finish
    marker = family_named(tokenizer.family).call_marker
    assert marker is not None and marker not in content, content
    assert finish == "tool_calls" and [c.function.name for c in calls] == ["python"]
