"""The reference LLM server in a subprocess, driven over real HTTP by the farm's sync and async clients
and by the official openai SDK."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from openai import OpenAI

from farm.chat.tokenizer import ChatTokenizer
from farm.chat.tool_calls import parse_assistant
from farm.inference.backend import AsyncBackendClient, BackendClient
from farm.inference.errors import BackendUnavailable, ContextOverflow
from farm.inference.generation import Generation
from tests.model_side.conftest import ServerProcess, free_port

pytestmark = pytest.mark.integration

PYTHON_TOOL = {
    "type": "function",
    "function": {
        "name": "python",
        "description": "Run Python code and return what it prints.",
        "parameters": {"type": "object", "properties": {"code": {"type": "string"}}, "required": ["code"]},
    },
}
QUESTION = [{"role": "user", "content": "How many apples are in the basket?"}]


def _run_tool(message: dict) -> dict:
    code = json.loads(message["tool_calls"][0]["function"]["arguments"])["code"]
    return {"role": "tool", "tool_call_id": message["tool_calls"][0]["id"], "content": str(eval(code[6:-1]))}


def _as_message(tokenizer: ChatTokenizer, generation: Generation) -> dict:
    parsed = parse_assistant(tokenizer.decode(generation.token_ids))
    message: dict = {"role": "assistant", "content": parsed.content}
    if parsed.tool_calls:
        message["tool_calls"] = [c.to_openai() for c in parsed.tool_calls]
    return message


def _check_two_turns(tokenizer: ChatTokenizer, generate) -> None:  # type: ignore[no-untyped-def]
    """Turn 2's prompt = turn 1's prompt + turn 1's sampled ids + the new messages, tokenized alone."""
    prompt1 = tokenizer.apply_chat_template(QUESTION, [PYTHON_TOOL])
    first = generate(prompt1, {"max_tokens": 200, "temperature": 1.0, "seed": 11})
    assert first.finish_reason == "stop"
    assert first.token_ids[-1] == tokenizer.eos_token_id
    assert len(first.logprobs) == len(first.token_ids)
    assert first.prompt_tokens == len(prompt1)
    call = _as_message(tokenizer, first)
    assert call["content"] == "Let me count them." and call["tool_calls"][0]["function"]["name"] == "python"
    tool = _run_tool(call)
    prompt2 = prompt1 + first.token_ids + tokenizer.continuation_ids([tool], [PYTHON_TOOL])
    assert prompt2 == tokenizer.apply_chat_template([*QUESTION, call, tool], [PYTHON_TOOL])
    second = generate(prompt2, {"max_tokens": 200, "seed": 11})
    answer = _as_message(tokenizer, second)["content"]
    assert answer == f"There are {tool['content']} apples, so the answer is \\boxed{{{tool['content']}}}."


@pytest.mark.parametrize("kind", ["vllm", "sglang"])
def test_sync_client_two_turn_tool_conversation(
    scripted_server: ServerProcess, tokenizer: ChatTokenizer, kind: str
) -> None:
    with httpx.Client(timeout=30) as http:
        client = BackendClient(scripted_server.address, kind, http)  # type: ignore[arg-type]
        _check_two_turns(tokenizer, client.generate)


@pytest.mark.parametrize("kind", ["vllm", "sglang"])
def test_async_client_two_turn_tool_conversation(
    scripted_server: ServerProcess, tokenizer: ChatTokenizer, kind: str
) -> None:
    async def main() -> None:
        async with AsyncBackendClient(scripted_server.address, kind) as client:  # type: ignore[arg-type]
            generations = {}

            async def generate(prompt: list[int], sampling: dict) -> Generation:
                return await client.generate(prompt, sampling)

            prompt = tokenizer.apply_chat_template(QUESTION, [PYTHON_TOOL])
            many = await asyncio.gather(*(generate(prompt, {"max_tokens": 64, "seed": s}) for s in range(8)))
            generations = {tuple(g.token_ids) for g in many}
            assert 1 <= len(generations) <= 2  # two branches at most
            first = await generate(prompt, {"max_tokens": 200, "seed": 3})
            again = await generate(prompt, {"max_tokens": 200, "seed": 3})
            assert first.token_ids == again.token_ids and first.logprobs == again.logprobs

    asyncio.run(main())


def test_chat_endpoint_agrees_with_token_path(
    scripted_server: ServerProcess, tokenizer: ChatTokenizer
) -> None:
    body = {
        "model": "farm-tiny",
        "messages": QUESTION,
        "tools": [PYTHON_TOOL],
        "seed": 11,
        "logprobs": True,
        "return_token_ids": True,
        "return_tokens_as_token_ids": True,
    }
    answer = httpx.post(f"{scripted_server.address}/chat/completions", json=body, timeout=30).json()
    choice = answer["choices"][0]
    assert answer["prompt_token_ids"] == tokenizer.apply_chat_template(QUESTION, [PYTHON_TOOL])
    with BackendClient(scripted_server.address) as client:
        same = client.generate(answer["prompt_token_ids"], {"max_tokens": 200, "seed": 11})
    assert choice["token_ids"] == same.token_ids
    assert [e["token"] for e in choice["logprobs"]["content"]] == [f"token_id:{t}" for t in same.token_ids]
    assert choice["finish_reason"] == "tool_calls"
    assert answer["usage"]["completion_tokens"] == len(choice["token_ids"])


@pytest.mark.parametrize("kind", ["vllm", "sglang"])
def test_context_overflow_is_classified(
    scripted_server: ServerProcess, tokenizer: ChatTokenizer, kind: str
) -> None:
    """vLLM's /v1/completions admits prompt + max_tokens == window; SGLang's /generate refuses it (its
    tokenizer_manager checks `>=`), each in its own words."""
    long_prompt = tokenizer.encode("word " * 1000)[:1000]  # the server's window is 1024
    wording, fits = ("maximum context length is 1024", 24) if kind == "vllm" else ("length of 1024", 23)
    with BackendClient(scripted_server.address, kind) as client:  # type: ignore[arg-type]
        with pytest.raises(ContextOverflow) as info:
            client.generate(long_prompt, {"max_tokens": 100})
        assert info.value.status == 400 and wording in info.value.message
        with pytest.raises(ContextOverflow):
            client.generate(long_prompt * 2, {"max_tokens": 1})
        with pytest.raises(ContextOverflow):
            client.generate(long_prompt, {"max_tokens": fits + 1})
        assert client.generate(long_prompt, {"max_tokens": fits}).finish_reason in ("stop", "length")


def test_dead_port_is_backend_unavailable() -> None:
    address = f"http://127.0.0.1:{free_port()}/v1"
    with BackendClient(address) as client, pytest.raises(BackendUnavailable) as info:
        client.generate([1, 2, 3], {"max_tokens": 4})
    assert info.value.backend == address

    async def main() -> None:
        async with AsyncBackendClient(address, "sglang") as client:
            await client.generate([1, 2, 3], {"max_tokens": 4})

    with pytest.raises(BackendUnavailable):
        asyncio.run(main())


def test_max_tokens_and_stop_strings(scripted_server: ServerProcess, tokenizer: ChatTokenizer) -> None:
    prompt = tokenizer.apply_chat_template(QUESTION, [PYTHON_TOOL])
    with BackendClient(scripted_server.address) as client:
        cut = client.generate(prompt, {"max_tokens": 3, "seed": 1})
        assert cut.finish_reason == "length" and len(cut.token_ids) == 3
        stopped = client.generate(prompt, {"max_tokens": 200, "seed": 1, "stop": [" count"]})
        assert stopped.finish_reason == "stop" and stopped.stop_reason == " count"
        assert stopped.text == "Let me"
        assert tokenizer.decode(stopped.token_ids).endswith(" count")


def test_completions_wire_shape(scripted_server: ServerProcess, tokenizer: ChatTokenizer) -> None:
    prompt = tokenizer.apply_chat_template(QUESTION)
    body = {"prompt": prompt, "max_tokens": 50, "logprobs": 0, "n": 2, "seed": 1, "return_token_ids": True}
    answer = httpx.post(f"{scripted_server.address}/completions", json=body, timeout=30).json()
    assert answer["object"] == "text_completion" and len(answer["choices"]) == 2
    choice = answer["choices"][0]
    assert choice["prompt_token_ids"] == prompt
    assert choice["logprobs"]["tokens"][0] == tokenizer.token_text(choice["token_ids"][0])
    assert "<|im_end|>" not in choice["text"]  # skip_special_tokens defaults to true
    assert answer["usage"]["prompt_tokens"] == len(prompt)  # counted once per prompt, not per sample
    text = httpx.post(f"{scripted_server.address}/completions", json={**body, "prompt": "hello"}, timeout=30)
    assert text.status_code == 200


def test_tokenizer_endpoints_and_models(scripted_server: ServerProcess, tokenizer: ChatTokenizer) -> None:
    root = scripted_server.root
    chat = httpx.post(f"{root}/tokenize", json={"messages": QUESTION, "tools": [PYTHON_TOOL]}).json()
    assert chat["tokens"] == tokenizer.apply_chat_template(QUESTION, [PYTHON_TOOL])
    assert chat["max_model_len"] == 1024
    plain = httpx.post(f"{root}/tokenize", json={"prompt": "2 + 2", "return_token_strs": True}).json()
    assert plain["count"] == len(plain["tokens"]) == len(plain["token_strs"])
    back = httpx.post(f"{root}/detokenize", json={"tokens": chat["tokens"]}).json()
    assert back["prompt"] == tokenizer.render(QUESTION, [PYTHON_TOOL], add_generation_prompt=True)
    models = httpx.get(f"{scripted_server.address}/models").json()
    assert models["data"][0]["id"] == "farm-tiny"
    bad = httpx.post(f"{scripted_server.address}/completions", json={"max_tokens": 3})
    assert bad.status_code == 400 and "prompt" in bad.json()["error"]["message"]


def test_openai_sdk_tool_call_round_trip(scripted_server: ServerProcess) -> None:
    client = OpenAI(base_url=scripted_server.address, api_key="unused", max_retries=0)
    messages: list = [{"role": "user", "content": "What is 17 * 3 + 2?"}]
    first = client.chat.completions.create(model="farm-tiny", messages=messages, tools=[PYTHON_TOOL], seed=4)
    choice = first.choices[0]
    assert choice.finish_reason == "tool_calls"
    call = choice.message.tool_calls[0]
    assert call.function.name == "python" and json.loads(call.function.arguments) == {
        "code": "print(17 * 3 + 2)"
    }
    messages.append(choice.message.model_dump(exclude_none=True))
    messages.append({"role": "tool", "tool_call_id": call.id, "content": "53"})
    second = client.chat.completions.create(
        model="farm-tiny",
        messages=messages,
        tools=[PYTHON_TOOL],
        seed=4,
        extra_body={"return_token_ids": True},
    )
    assert second.choices[0].finish_reason == "stop"
    assert second.choices[0].message.content in ("The answer is \\boxed{53}.", "The answer is \\boxed{54}.")
    extra = second.model_extra or {}
    assert extra["prompt_token_ids"][-3:] != []

    stream = client.chat.completions.create(
        model="farm-tiny",
        messages=messages[:1],
        tools=[PYTHON_TOOL],
        seed=4,
        stream=True,
        stream_options={"include_usage": True},
    )
    calls, finish, usage = [], None, None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for c in chunk.choices:
            calls += c.delta.tool_calls or []
            finish = c.finish_reason or finish
    assert finish == "tool_calls" and calls[0].function.name == "python"
    assert usage is not None and usage.completion_tokens > 0
