"""Translator properties: SDK types accept what we render, streams reassemble to the response, and
provider requests built from random chat conversations parse back to the same chat messages."""

from __future__ import annotations

import json
from typing import Any

import anthropic.types
import openai.types.chat
import openai.types.responses
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter

from farm.gateway.errors import ErrorKind, GatewayError
from farm.gateway.normalized import ChatCompletion, ChatRequest, ToolCall, Usage
from farm.gateway.providers import (
    ANTHROPIC,
    GOOGLE,
    OPENAI_CHAT,
    OPENAI_RESPONSES,
    PROVIDERS,
    detect_provider,
)
from farm.gateway.providers import anthropic_messages as anth
from farm.gateway.providers import google_genai as goog
from farm.gateway.providers import openai_chat as chat
from farm.gateway.providers import openai_responses as resp
from farm.gateway.upstream import client_error, parse_chat_reply

TEXT = st.text(st.characters(exclude_categories=("Cs",)), min_size=1, max_size=80)
NAMES = st.from_regex(r"[a-z][a-z_]{0,11}", fullmatch=True)
ARGS = st.dictionaries(NAMES, st.one_of(st.integers(), TEXT, st.booleans()), max_size=3)


@st.composite
def completions(draw: st.DrawFn) -> ChatCompletion:
    calls = [
        ToolCall(id=f"call_{i}", name=draw(NAMES), arguments=json.dumps(draw(ARGS), ensure_ascii=False))
        for i in range(draw(st.integers(0, 3)))
    ]
    finish = "tool_calls" if calls else draw(st.sampled_from(["stop", "length"]))
    return ChatCompletion(
        id="cmpl-1",
        model="served",
        content=draw(st.one_of(st.none(), TEXT)),
        reasoning=draw(st.one_of(st.none(), TEXT)),
        tool_calls=calls,
        finish_reason=finish,
        usage=Usage(prompt_tokens=draw(st.integers(1, 10_000)), completion_tokens=draw(st.integers(1, 4096))),
    )


def _sse(frames: list[str]) -> list[tuple[str | None, Any]]:
    events = []
    for frame in frames:
        assert frame.endswith(("\n\n", "\r\n\r\n"))
        event, data = None, None
        for line in frame.replace("\r\n", "\n").strip("\n").split("\n"):
            key, _, value = line.partition(": ")
            if key == "event":
                event = value
            elif key == "data":
                data = value if value == "[DONE]" else json.loads(value)
        events.append((event, data))
    return events


REQUEST = ChatRequest(model="client-model", messages=[{"role": "user", "content": "x"}], include_usage=True)


@settings(max_examples=25, deadline=None)
@given(completions())
def test_openai_chat_response_and_stream(completion: ChatCompletion) -> None:
    parsed = openai.types.chat.ChatCompletion.model_validate(chat.render_response(completion, REQUEST))
    assert parsed.model == "client-model"
    assert parsed.choices[0].message.content == completion.content
    assert [
        (c.id, c.function.name, c.function.arguments) for c in parsed.choices[0].message.tool_calls or []
    ] == [(c.id, c.name, c.arguments) for c in completion.tool_calls]
    events = _sse(PROVIDERS[OPENAI_CHAT].render_stream(completion, REQUEST))
    assert events[-1] == (None, "[DONE]")
    chunks = [openai.types.chat.ChatCompletionChunk.model_validate(d) for _, d in events[:-1]]
    content = "".join(ch.delta.content or "" for c in chunks for ch in c.choices)
    reasoning = "".join(
        getattr(ch.delta, "reasoning_content", None) or "" for c in chunks for ch in c.choices
    )
    assert content == (completion.content or "") and reasoning == (completion.reasoning or "")
    arguments: dict[int, str] = {}
    for c in chunks:
        for ch in c.choices:
            for tc in ch.delta.tool_calls or []:
                arguments[tc.index] = arguments.get(tc.index, "") + (tc.function.arguments or "")  # type: ignore[union-attr]
    assert [arguments[i] for i in sorted(arguments)] == [c.arguments for c in completion.tool_calls]
    assert [ch.finish_reason for c in chunks for ch in c.choices if ch.finish_reason] == [
        completion.finish_reason
    ]
    assert chunks[-1].usage and chunks[-1].usage.completion_tokens == completion.usage.completion_tokens


@settings(max_examples=25, deadline=None)
@given(completions())
def test_anthropic_response_and_stream(completion: ChatCompletion) -> None:
    message = anthropic.types.Message.model_validate(anth.render_response(completion, REQUEST))
    assert (message.stop_reason == "tool_use") == bool(completion.tool_calls)
    uses = [b for b in message.content if b.type == "tool_use"]
    assert [b.input for b in uses] == [json.loads(c.arguments) for c in completion.tool_calls]
    adapter: TypeAdapter[Any] = TypeAdapter(anthropic.types.RawMessageStreamEvent)
    events = _sse(PROVIDERS[ANTHROPIC].render_stream(completion, REQUEST))
    assert [e for e, _ in events][:2] == ["message_start", "ping"]
    assert [e for e, _ in events][-2:] == ["message_delta", "message_stop"]
    blocks: dict[int, dict[str, Any]] = {}
    for name, data in events:
        if name == "ping":
            continue
        assert adapter.validate_python(data).type == name
        if name == "content_block_start":
            blocks[data["index"]] = {**data["content_block"], "_json": ""}
        elif name == "content_block_delta":
            block, delta = blocks[data["index"]], data["delta"]
            if delta["type"] == "text_delta":
                block["text"] += delta["text"]
            elif delta["type"] == "thinking_delta":
                block["thinking"] += delta["thinking"]
            elif delta["type"] == "input_json_delta":
                block["_json"] += delta["partial_json"]
    rebuilt = []
    for _, block in sorted(blocks.items()):
        raw = block.pop("_json")
        if block["type"] == "tool_use":
            block["input"] = json.loads(raw)
        rebuilt.append(block)
    assert rebuilt == [b.model_dump(exclude_none=True) for b in message.content]
    assert events[-2][1]["delta"]["stop_reason"] == message.stop_reason


@settings(max_examples=25, deadline=None)
@given(completions(), st.booleans())
def test_responses_response_and_stream(completion: ChatCompletion, custom: bool) -> None:
    request = REQUEST.model_copy(
        update={"custom_tools": [c.name for c in completion.tool_calls] if custom else []}
    )
    if custom:
        completion = completion.model_copy(
            update={
                "tool_calls": [
                    c.model_copy(update={"arguments": json.dumps({"input": "raw"})})
                    for c in completion.tool_calls
                ]
            }
        )
    rendered = resp.render_response(completion, request)
    response = openai.types.responses.Response.model_validate(rendered)
    assert response.status == ("incomplete" if completion.finish_reason == "length" else "completed")
    assert response.output_text == (completion.content or "")
    adapter: TypeAdapter[Any] = TypeAdapter(openai.types.responses.ResponseStreamEvent)
    events = _sse(PROVIDERS[OPENAI_RESPONSES].render_stream(completion, request))
    assert [d["sequence_number"] for _, d in events] == list(range(len(events)))
    for name, data in events:
        assert adapter.validate_python(data).type == name
    assert events[0][0] == "response.created" and events[-1][0] in (
        "response.completed",
        "response.incomplete",
    )
    assert events[-1][1]["response"]["output"] == rendered["output"], (
        "the terminal event carries the full output"
    )
    deltas = "".join(d["delta"] for n, d in events if n == "response.output_text.delta")
    assert deltas == (completion.content or "")
    arguments = "".join(d["delta"] for n, d in events if n == "response.function_call_arguments.delta")
    assert arguments == ("" if custom else "".join(c.arguments for c in completion.tool_calls))


@settings(max_examples=25, deadline=None)
@given(completions())
def test_google_response_and_stream(completion: ChatCompletion) -> None:
    types = pytest.importorskip("google.genai.types")
    response = types.GenerateContentResponse.model_validate(goog.render_response(completion, REQUEST))
    assert [fc.args for fc in response.function_calls or []] == [
        json.loads(c.arguments) for c in completion.tool_calls
    ]
    chunks = [
        types.GenerateContentResponse.model_validate(d)
        for _, d in _sse(PROVIDERS[GOOGLE].render_stream(completion, REQUEST))
    ]
    text = "".join(p.text or "" for c in chunks for p in c.candidates[0].content.parts or [] if not p.thought)
    assert text == (completion.content or "")
    assert chunks[-1].candidates[0].finish_reason is not None
    assert all(c.candidates[0].finish_reason is None for c in chunks[:-1])


# ---- request round trips: chat conversation -> provider request -> chat conversation -----------------------


@st.composite
def conversations(draw: st.DrawFn) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "system", "content": draw(TEXT)}]
    messages.append({"role": "user", "content": draw(TEXT)})
    calls_made = 0
    for _ in range(draw(st.integers(0, 4))):
        calls = [
            {
                "id": f"call_{calls_made + i}",
                "type": "function",
                "function": {"name": draw(NAMES), "arguments": json.dumps(draw(ARGS), ensure_ascii=False)},
            }
            for i in range(draw(st.integers(0, 2)))
        ]
        calls_made += len(calls)
        assistant: dict[str, Any] = {
            "role": "assistant",
            "content": draw(TEXT) if not calls else draw(st.one_of(st.none(), TEXT)),
        }
        if calls:
            assistant["tool_calls"] = calls
        messages.append(assistant)
        for call in calls:
            result = json.dumps({"result": draw(TEXT)}, ensure_ascii=False)
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": result})
        if not calls or draw(st.booleans()):
            messages.append({"role": "user", "content": draw(TEXT)})
    return messages


def _to_anthropic(messages: list[dict[str, Any]]) -> dict[str, Any]:
    out: list[dict[str, Any]] = []
    for m in messages[1:]:
        if m["role"] == "assistant":
            blocks: list[dict[str, Any]] = [{"type": "text", "text": m["content"]}] if m["content"] else []
            for c in m.get("tool_calls", []):
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": c["id"],
                        "name": c["function"]["name"],
                        "input": json.loads(c["function"]["arguments"]),
                    }
                )
            out.append({"role": "assistant", "content": blocks})
            continue
        block = (
            {"type": "tool_result", "tool_use_id": m["tool_call_id"], "content": m["content"]}
            if m["role"] == "tool"
            else {"type": "text", "text": m["content"]}
        )
        if out and out[-1]["role"] == "user":
            out[-1]["content"].append(block)
        else:
            out.append({"role": "user", "content": [block]})
    return {"model": "claude", "max_tokens": 100, "system": messages[0]["content"], "messages": out}


def _to_responses(messages: list[dict[str, Any]]) -> dict[str, Any]:
    items: list[dict[str, Any]] = []
    for m in messages[1:]:
        if m["role"] == "user":
            items.append({"role": "user", "content": [{"type": "input_text", "text": m["content"]}]})
        elif m["role"] == "tool":
            items.append(
                {"type": "function_call_output", "call_id": m["tool_call_id"], "output": m["content"]}
            )
        else:
            if m["content"]:
                content = [{"type": "output_text", "text": m["content"], "annotations": []}]
                items.append({"type": "message", "role": "assistant", "content": content})
            for c in m.get("tool_calls", []):
                fn = c["function"]
                items.append(
                    {
                        "type": "function_call",
                        "call_id": c["id"],
                        "name": fn["name"],
                        "arguments": fn["arguments"],
                    }
                )
    return {"model": "gpt", "instructions": messages[0]["content"], "input": items}


def _to_google(messages: list[dict[str, Any]], with_ids: bool) -> dict[str, Any]:
    contents: list[dict[str, Any]] = []
    names = {c["id"]: c["function"]["name"] for m in messages for c in m.get("tool_calls", [])}
    for m in messages[1:]:
        if m["role"] == "assistant":
            parts: list[dict[str, Any]] = [{"text": m["content"]}] if m["content"] else []
            for c in m.get("tool_calls", []):
                call = {"name": c["function"]["name"], "args": json.loads(c["function"]["arguments"])}
                parts.append({"functionCall": {**call, **({"id": c["id"]} if with_ids else {})}})
            contents.append({"role": "model", "parts": parts})
            continue
        if m["role"] == "tool":
            response = {"name": names[m["tool_call_id"]], "response": json.loads(m["content"])}
            part: dict[str, Any] = {
                "functionResponse": {**response, **({"id": m["tool_call_id"]} if with_ids else {})}
            }
        else:
            part = {"text": m["content"]}
        if contents and contents[-1]["role"] == "user":
            contents[-1]["parts"].append(part)
        else:
            contents.append({"role": "user", "parts": [part]})
    return {"systemInstruction": {"parts": [{"text": messages[0]["content"]}]}, "contents": contents}


@settings(max_examples=40, deadline=None)
@given(conversations())
def test_requests_round_trip_to_chat_messages(messages: list[dict[str, Any]]) -> None:
    assert anth.parse_request(_to_anthropic(messages)).messages == messages
    assert resp.parse_request(_to_responses(messages)).messages == messages
    assert goog.parse_request(_to_google(messages, with_ids=True), "gemini").messages == messages
    assert chat.parse_request({"model": "m", "messages": messages}).messages == messages


@settings(max_examples=40, deadline=None)
@given(conversations())
def test_google_calls_without_ids_get_consistent_ids(messages: list[dict[str, Any]]) -> None:
    parsed = goog.parse_request(_to_google(messages, with_ids=False), "gemini").messages
    issued = [c["id"] for m in parsed for c in m.get("tool_calls", [])]
    answered = [m["tool_call_id"] for m in parsed if m["role"] == "tool"]
    assert issued == answered and len(set(issued)) == len(issued)
    again = goog.parse_request(_to_google(messages, with_ids=False), "gemini").messages
    assert again == parsed, "the same history always gets the same ids"


def test_tools_and_choices_translate() -> None:
    schema = {"type": "object", "properties": {"x": {"type": "string"}}}
    a = anth.parse_request(
        {
            "model": "c",
            "max_tokens": 5,
            "messages": [],
            "tools": [
                {"name": "f", "input_schema": schema},
                {"type": "web_search_20250305", "name": "web_search"},
            ],
            "tool_choice": {"type": "any", "disable_parallel_tool_use": True},
            "stop_sequences": ["END"],
            "thinking": {"type": "enabled", "budget_tokens": 100},
        }
    )
    assert [t["function"]["name"] for t in a.tools] == ["f", "web_search"]  # a server tool is carried
    assert (a.tool_choice, a.parallel_tool_calls, a.sampling["stop"]) == ("required", False, ["END"])
    assert a.chat_template_kwargs == {"enable_thinking": True}
    g = goog.parse_request(
        {
            "contents": [],
            "tools": [
                {
                    "functionDeclarations": [
                        {
                            "name": "f",
                            "parameters": {"type": "OBJECT", "properties": {"x": {"type": "STRING"}}},
                        }
                    ]
                }
            ],
            "toolConfig": {"functionCallingConfig": {"mode": "ANY", "allowedFunctionNames": ["f"]}},
            "generationConfig": {"maxOutputTokens": 9, "topP": 0.5},
        },
        "gemini",
    )
    assert g.tools[0]["function"]["parameters"] == schema
    assert g.tool_choice == {"type": "function", "function": {"name": "f"}}
    assert g.sampling == {"max_tokens": 9, "top_p": 0.5}
    r = resp.parse_request(
        {
            "model": "g",
            "input": "hi",
            "tools": [{"type": "custom", "name": "apply_patch"}, {"type": "web_search"}],
        }
    )
    assert r.custom_tools == ["apply_patch"]
    assert [t["function"]["name"] for t in r.tools] == ["apply_patch", "web_search"]
    body = a.upstream_body("served")
    assert body["logprobs"] is True and body["return_token_ids"] is True and body["top_logprobs"] == 0
    assert body["stream"] is False and body["model"] == "served"


def test_detection_by_path_headers_and_body() -> None:
    assert detect_provider("/v1/chat/completions") == "openai_chat"
    assert detect_provider("/responses") == "openai_responses"
    assert detect_provider("/v1/messages/count_tokens") == "anthropic"
    assert detect_provider("/v1beta/models/g:streamGenerateContent") == "google"
    assert detect_provider("/x", {"anthropic-version": "2023-06-01"}) == "anthropic"
    assert detect_provider("/x", {"x-goog-api-key": "k"}) == "google"
    assert detect_provider("/x", {}, {"contents": []}) == "google"
    assert detect_provider("/x", {}, {"input": "hi"}) == "openai_responses"
    assert detect_provider("/x", {}, {"messages": [], "system": "s"}) == "anthropic"
    assert detect_provider("/x", {}, {"messages": []}) == "openai_chat"


def test_upstream_reply_parsing_checks_token_alignment() -> None:
    reply = {
        "model": "served",
        "prompt_token_ids": [1, 2, 3],
        "choices": [
            {
                "message": {
                    "role": "assistant",
                    "content": "hi",
                    "tool_calls": [{"id": "t", "function": {"name": "f", "arguments": "{}"}}],
                },
                "token_ids": [7, 8],
                "logprobs": {
                    "content": [
                        {"token": "token_id:7", "logprob": -0.1},
                        {"token": "token_id:8", "logprob": -0.2},
                    ]
                },
                "finish_reason": "stop",
            }
        ],
    }
    parsed = parse_chat_reply(reply, "c1")
    assert parsed.completion.finish_reason == "tool_calls", "a tool call means tool_calls whatever vLLM said"
    assert parsed.response_logprobs == [-0.1, -0.2] and parsed.capture_problem is None
    reply["choices"][0]["logprobs"]["content"][1]["token"] = "token_id:9"  # type: ignore[index]
    assert parse_chat_reply(reply, "c1").response_logprobs is None
    del reply["prompt_token_ids"]
    assert "no token ids" in (parse_chat_reply(reply, "c1").capture_problem or "")


def test_context_overflow_wording_and_error_shapes() -> None:
    old = client_error(
        400, "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens"
    )
    new = client_error(
        400,
        "'max_tokens' is too large: 1000. This model's maximum context length is 32768 tokens and your "
        "request has 32000 input tokens (1000 > 32768 - 32000).",
    )
    assert (old.kind, old.prompt_tokens, old.max_tokens) == (ErrorKind.context_overflow, 5000, 4096)
    assert (new.kind, new.prompt_tokens, new.max_tokens) == (ErrorKind.context_overflow, 32000, 32768)
    assert client_error(400, "bad tool_choice").kind is ErrorKind.invalid_request
    missing = GatewayError(ErrorKind.not_found, "no such session")
    shapes = {name: p.render_error(missing) for name, p in PROVIDERS.items()}
    assert shapes["openai_chat"]["error"]["type"] == "not_found_error"
    assert shapes["anthropic"] == {
        "type": "error",
        "error": {"type": "not_found_error", "message": "no such session"},
    }
    assert shapes["google"]["error"] == {"code": 404, "message": "no such session", "status": "NOT_FOUND"}


@given(TEXT, st.sampled_from(["content", "reasoning"]), NAMES)
def test_chat_text_frames_are_the_generic_chunk(text: str, kind: str, model: str) -> None:
    """The streamed text frame spliced from pre-encoded parts is byte for byte the generic chunk."""
    encoder = chat.StreamEncoder(ChatCompletion(id="c1", model=model), ChatRequest(messages=[]))
    key = "reasoning_content" if kind == "reasoning" else "content"
    assert encoder.text(kind, text) == [encoder._chunk({key: text})]
