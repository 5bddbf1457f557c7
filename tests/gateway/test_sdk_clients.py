"""The official SDKs talk to the gateway (a real `farm gateway` process in front of a fake vLLM server)."""

from __future__ import annotations

import json
from typing import Any

import anthropic
import httpx
import openai
import pytest

pytestmark = pytest.mark.integration

ADD_SCHEMA = {
    "type": "object",
    "properties": {"a": {"type": "integer"}, "b": {"type": "integer"}},
    "required": ["a", "b"],
}
CALL_ADD = 'CALL add {"a": 1, "b": 2}'


def _export(gateway: str, sid: str, builder: str, **extra: Any) -> list[dict[str, Any]]:
    response = httpx.post(f"{gateway}/gateway/sessions/{sid}/export", json={"builder": builder, **extra})
    response.raise_for_status()
    return response.json()["traces"]


def _completions(gateway: str, sid: str) -> list[dict[str, Any]]:
    response = httpx.get(f"{gateway}/gateway/sessions/{sid}/completions")
    response.raise_for_status()
    return response.json()


def _assert_one_faithful_trace(gateway: str, sid: str, calls: int) -> None:
    records = _completions(gateway, sid)
    assert len(records) == calls
    assert all(r["prompt_ids"] and r["response_ids"] and r["response_logprobs"] for r in records)
    assert len(_export(gateway, sid, "per_request")) == calls
    (trace,) = _export(gateway, sid, "prefix_merging")
    assert trace["metadata"]["retokenization_drift"] is False
    assert trace["prompt_ids"] == records[0]["prompt_ids"]
    for segment, record in zip(trace["metadata"]["segments"], records, strict=True):
        start, n = segment["start"], segment["length"]
        assert trace["response_ids"][start : start + n] == record["response_ids"]
        assert trace["response_logprobs"][start : start + n] == record["response_logprobs"]
        assert trace["prompt_ids"] + trace["response_ids"][:start] == record["prompt_ids"]
    assert sum(trace["loss_mask"]) == sum(len(r["response_ids"]) for r in records)


def test_openai_chat_tool_round_trip_and_stream(gateway: str, session: dict[str, str]) -> None:
    client = openai.OpenAI(base_url=session["base_url"] + "/v1", api_key="unused", max_retries=0)
    tools = [
        {"type": "function", "function": {"name": "add", "description": "Add", "parameters": ADD_SCHEMA}}
    ]
    messages: list[Any] = [{"role": "system", "content": "be brief"}, {"role": "user", "content": CALL_ADD}]
    first = client.chat.completions.create(model="gpt-test", messages=messages, tools=tools)
    assert first.model == "gpt-test"
    assert first.choices[0].finish_reason == "tool_calls"
    (call,) = first.choices[0].message.tool_calls or []
    assert call.function.name == "add" and json.loads(call.function.arguments) == {"a": 1, "b": 2}
    assert first.usage and first.usage.completion_tokens > 0
    messages += [first.choices[0].message.model_dump(exclude_none=True)]
    messages += [{"role": "tool", "tool_call_id": call.id, "content": "3"}]
    with client.chat.completions.stream(model="gpt-test", messages=messages, tools=tools) as stream:
        final = stream.get_final_completion()
    assert final.choices[0].message.content == "done: 3"
    assert final.choices[0].finish_reason == "stop"
    streamed = client.chat.completions.create(
        model="gpt-test",
        messages=[{"role": "user", "content": CALL_ADD}],
        tools=tools,
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(streamed)
    arguments = "".join(
        tc.function.arguments or "" for c in chunks for ch in c.choices for tc in ch.delta.tool_calls or []
    )
    assert json.loads(arguments) == {"a": 1, "b": 2}
    assert chunks[-1].usage and chunks[-1].usage.total_tokens > 0
    records = _completions(gateway, session["session_id"])
    assert [r["metadata"]["stream"] for r in records] == [False, True, True]
    raw = httpx.post(
        f"{session['base_url']}/v1/chat/completions",
        json={"model": "m", "messages": [{"role": "user", "content": "hi"}]},
    ).json()
    assert "prompt_token_ids" not in raw and "token_ids" not in raw["choices"][0], (
        "training fields are stripped"
    )


def test_openai_chat_session_merges_into_one_trace(gateway: str, session: dict[str, str]) -> None:
    client = openai.OpenAI(base_url=session["base_url"] + "/v1", api_key="unused", max_retries=0)
    tools = [
        {"type": "function", "function": {"name": "add", "description": "Add", "parameters": ADD_SCHEMA}}
    ]
    messages: list[Any] = [{"role": "user", "content": CALL_ADD}]
    for turn in range(3):
        reply = client.chat.completions.create(model="m", messages=messages, tools=tools)
        message = reply.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if message.tool_calls:
            messages.append({"role": "tool", "tool_call_id": message.tool_calls[0].id, "content": str(turn)})
        else:
            messages.append({"role": "user", "content": f"next {turn}"})
    _assert_one_faithful_trace(gateway, session["session_id"], 3)


def test_anthropic_messages_tool_round_trip_stream_and_count(gateway: str, session: dict[str, str]) -> None:
    client = anthropic.Anthropic(base_url=session["base_url"], api_key="unused", max_retries=0)
    tools: list[Any] = [{"name": "add", "description": "Add", "input_schema": ADD_SCHEMA}]
    messages: list[Any] = [{"role": "user", "content": CALL_ADD}]
    first = client.messages.create(
        model="claude-test", max_tokens=256, system="be brief", messages=messages, tools=tools
    )
    assert first.stop_reason == "tool_use" and first.model == "claude-test"
    (block,) = [b for b in first.content if b.type == "tool_use"]
    assert block.name == "add" and block.input == {"a": 1, "b": 2}
    messages += [
        {"role": "assistant", "content": [b.model_dump() for b in first.content]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": block.id, "content": "3"}]},
    ]
    second = client.messages.create(
        model="claude-test", max_tokens=256, system="be brief", messages=messages, tools=tools
    )
    assert second.stop_reason == "end_turn"
    assert [b.text for b in second.content if b.type == "text"] == ["done: 3"]
    with client.messages.stream(
        model="claude-test", max_tokens=256, messages=[{"role": "user", "content": CALL_ADD}], tools=tools
    ) as stream:
        streamed = stream.get_final_message()
    (streamed_block,) = [b for b in streamed.content if b.type == "tool_use"]
    assert streamed_block.input == {"a": 1, "b": 2} and streamed.stop_reason == "tool_use"
    with client.messages.stream(
        model="claude-test", max_tokens=256, messages=[{"role": "user", "content": "THINK hmm; SAY yes"}]
    ) as stream:
        thought = stream.get_final_message()
    assert [b.type for b in thought.content] == ["thinking", "text"]
    assert thought.content[0].thinking == "hmm" and thought.content[1].text == "yes"  # type: ignore[union-attr]
    counted = client.messages.count_tokens(model="claude-test", messages=messages, tools=tools)
    assert counted.input_tokens > 0
    records = _completions(gateway, session["session_id"])
    assert len(records) == 4
    assert records[1]["request_messages"][-1] == {"role": "tool", "tool_call_id": block.id, "content": "3"}


def test_anthropic_multi_turn_merges_into_one_trace(gateway: str, session: dict[str, str]) -> None:
    client = anthropic.Anthropic(base_url=session["base_url"], api_key="unused", max_retries=0)
    tools: list[Any] = [{"name": "add", "description": "Add", "input_schema": ADD_SCHEMA}]
    messages: list[Any] = [{"role": "user", "content": CALL_ADD}]
    for turn in range(3):
        reply = client.messages.create(model="claude-test", max_tokens=256, messages=messages, tools=tools)
        messages.append({"role": "assistant", "content": [b.model_dump() for b in reply.content]})
        uses = [b for b in reply.content if b.type == "tool_use"]
        if uses:
            content = [{"type": "tool_result", "tool_use_id": uses[0].id, "content": str(turn)}]
            messages.append({"role": "user", "content": content})
        else:
            messages.append({"role": "user", "content": CALL_ADD})
    _assert_one_faithful_trace(gateway, session["session_id"], 3)


def test_openai_responses_function_call_round_trip_and_stream(gateway: str, session: dict[str, str]) -> None:
    client = openai.OpenAI(base_url=session["base_url"] + "/v1", api_key="unused", max_retries=0)
    tools: list[Any] = [
        {"type": "function", "name": "add", "description": "Add", "parameters": ADD_SCHEMA, "strict": False}
    ]
    assert client.responses.create(model="gpt-test", input="hello").output_text == "echo: hello"
    first = client.responses.create(model="gpt-test", instructions="be brief", input=CALL_ADD, tools=tools)
    (call,) = [item for item in first.output if item.type == "function_call"]
    assert call.name == "add" and json.loads(call.arguments) == {"a": 1, "b": 2}
    follow_up: list[Any] = [
        {"role": "user", "content": CALL_ADD},
        *[item.model_dump(exclude_none=True) for item in first.output],
        {"type": "function_call_output", "call_id": call.call_id, "output": "3"},
    ]
    with client.responses.stream(
        model="gpt-test", instructions="be brief", input=follow_up, tools=tools
    ) as stream:
        events = [event.type for event in stream]
        final = stream.get_final_response()
    assert final.output_text == "done: 3" and final.status == "completed"
    assert events[0] == "response.created" and events[-1] == "response.completed"
    assert "response.output_text.delta" in events
    with client.responses.stream(model="gpt-test", input=CALL_ADD, tools=tools) as stream:
        streamed = stream.get_final_response()
    (streamed_call,) = [item for item in streamed.output if item.type == "function_call"]
    assert json.loads(streamed_call.arguments) == {"a": 1, "b": 2}
    custom: list[Any] = [{"type": "custom", "name": "apply_patch", "description": "Patch files"}]
    patched = client.responses.create(
        model="gpt-test", input='CALL apply_patch {"input": "*** Begin Patch"}', tools=custom
    )
    (custom_call,) = patched.output
    assert custom_call.type == "custom_tool_call" and custom_call.input == "*** Begin Patch"
    records = _completions(gateway, session["session_id"])
    assert records[2]["request_messages"][0] == {"role": "system", "content": "be brief"}
    assert records[2]["request_messages"][-1]["role"] == "tool"


def test_google_genai_function_call_round_trip_and_stream(gateway: str, session: dict[str, str]) -> None:
    genai = pytest.importorskip("google.genai")
    from google.genai import types

    client = genai.Client(
        api_key="unused", http_options=types.HttpOptions(base_url=session["base_url"], api_version="v1beta")
    )
    assert client.models.generate_content(model="gemini-test", contents="hello").text == "echo: hello"
    declaration = types.FunctionDeclaration(name="add", description="Add", parameters_json_schema=ADD_SCHEMA)
    config = types.GenerateContentConfig(
        tools=[types.Tool(function_declarations=[declaration])],
        automatic_function_calling=types.AutomaticFunctionCallingConfig(disable=True),
        system_instruction="be brief",
    )
    first = client.models.generate_content(model="gemini-test", contents=CALL_ADD, config=config)
    (call,) = first.function_calls or []
    assert call.name == "add" and call.args == {"a": 1, "b": 2}
    history = [
        types.Content(role="user", parts=[types.Part(text=CALL_ADD)]),
        first.candidates[0].content,  # type: ignore[index]
        types.Content(
            role="user", parts=[types.Part.from_function_response(name="add", response={"result": 3})]
        ),
    ]
    second = client.models.generate_content(model="gemini-test", contents=history, config=config)
    assert second.text == 'done: {"result": 3}'
    chunks = list(
        client.models.generate_content_stream(model="gemini-test", contents="hello streaming world")
    )
    assert "".join(c.text or "" for c in chunks) == "echo: hello streaming world"
    assert chunks[-1].candidates[0].finish_reason == types.FinishReason.STOP  # type: ignore[index]
    assert client.models.count_tokens(model="gemini-test", contents="hello").total_tokens > 0
    records = _completions(gateway, session["session_id"])
    assert (
        records[2]["request_messages"][-1]["tool_call_id"]
        == records[2]["request_messages"][-2]["tool_calls"][0]["id"]
    )


def test_google_genai_default_api_version_and_both_stream_framings(
    gateway: str, session: dict[str, str]
) -> None:
    """google-genai calls /v1/ unless told otherwise; alt=sse is SSE in CRLF pairs, else a JSON array."""
    genai = pytest.importorskip("google.genai")
    from google.genai import types

    client = genai.Client(api_key="unused", http_options=types.HttpOptions(base_url=session["base_url"]))
    assert client.models.generate_content(model="gemini-test", contents="hello").text == "echo: hello"
    chunks = list(client.models.generate_content_stream(model="gemini-test", contents="hello v1 stream"))
    assert "".join(c.text or "" for c in chunks) == "echo: hello v1 stream"
    body = {"contents": [{"role": "user", "parts": [{"text": "hello framing"}]}]}
    url = f"{session['base_url']}/v1/models/gemini-test:streamGenerateContent"
    sse = httpx.post(url, params={"alt": "sse"}, json=body)
    assert sse.headers["content-type"].startswith("text/event-stream")
    events = sse.text.split("\r\n\r\n")
    assert events[-1] == "" and all(e.startswith("data: ") for e in events[:-1])
    array = httpx.post(url, json=body)
    assert array.headers["content-type"].startswith("application/json")
    streamed = [types.GenerateContentResponse.model_validate(c) for c in array.json()]
    assert "".join(c.text or "" for c in streamed) == "echo: hello framing"
    records = _completions(gateway, session["session_id"])
    assert len(records) == 4 and all(r["provider"] == "google" for r in records)
