"""Every tool type each provider API can send is carried to the model as a function or refused by name."""

from __future__ import annotations

import json
from typing import Any

import httpx
import openai.types.chat
import openai.types.responses
import pytest
from pydantic import TypeAdapter

from farm.gateway.normalized import ChatCompletion, ToolCall
from farm.gateway.providers import OPENAI_RESPONSES, PROVIDERS, RequestError
from farm.gateway.providers import anthropic_messages as anth
from farm.gateway.providers import google_genai as goog
from farm.gateway.providers import openai_chat as chat
from farm.gateway.providers import openai_responses as resp

OUTPUT_ITEM: TypeAdapter[Any] = TypeAdapter(openai.types.responses.ResponseOutputItem)
STREAM_EVENT: TypeAdapter[Any] = TypeAdapter(openai.types.responses.ResponseStreamEvent)


def _names(tools: list[dict[str, Any]]) -> list[str]:
    return [t["function"]["name"] for t in tools]


def test_responses_carries_every_client_and_hosted_tool_and_refuses_the_rest() -> None:
    tools = [
        {"type": "function", "name": "exec_command", "parameters": {"type": "object"}},
        {"type": "custom", "name": "apply_patch_free"},
        {
            "type": "namespace",
            "name": "collab",
            "description": "multi-agent",
            "tools": [{"type": "function", "name": "spawn_agent", "parameters": {"type": "object"}}],
        },
        {"type": "local_shell"},
        {"type": "shell"},
        {"type": "apply_patch"},
        {"type": "web_search"},
        {"type": "web_search_preview_2025_03_11"},
        {"type": "file_search", "vector_store_ids": ["vs"]},
        {"type": "code_interpreter", "container": {"type": "auto"}},
        {"type": "image_generation"},
        {"type": "tool_search", "execution": "client"},
    ]
    request = resp.parse_request({"model": "m", "input": "hi", "tools": tools})
    assert _names(request.tools) == [
        "exec_command",
        "apply_patch_free",
        "collab__spawn_agent",
        "local_shell",
        "shell",
        "apply_patch",
        "web_search",
        "file_search",
        "code_interpreter",
        "image_generation",
        "tool_search",
    ]
    for kind in ("mcp", "computer_use_preview", "computer", "programmatic_tool_calling", "made_up"):
        with pytest.raises(RequestError, match=rf"tools\[1\]: tool type '{kind}'"):
            resp.parse_request({"input": "hi", "tools": [{"type": "function", "name": "f"}, {"type": kind}]})


def test_responses_native_and_namespaced_calls_answer_in_their_own_items() -> None:
    tools = [
        {
            "type": "namespace",
            "name": "collab",
            "description": "",
            "tools": [{"type": "function", "name": "go"}],
        },
        {"type": "local_shell"},
        {"type": "shell"},
        {"type": "apply_patch"},
    ]
    request = resp.parse_request({"model": "m", "input": "hi", "tools": tools})
    calls = [
        ToolCall(id="c1", name="collab__go", arguments='{"task": "x"}'),
        ToolCall(id="c2", name="local_shell", arguments='{"command": ["ls", "-l"], "workdir": "/w"}'),
        ToolCall(id="c3", name="shell", arguments='{"commands": ["pwd"]}'),
        ToolCall(id="c4", name="apply_patch", arguments='{"type": "delete_file", "path": "a.py"}'),
    ]
    completion = ChatCompletion(id="x", model="m", tool_calls=calls, finish_reason="tool_calls")
    output = resp.render_response(completion, request)["output"]
    items = [OUTPUT_ITEM.validate_python(item) for item in output]
    assert [i.type for i in items] == ["function_call", "local_shell_call", "shell_call", "apply_patch_call"]
    assert items[0].name == "go" and items[0].namespace == "collab"
    assert items[1].action.command == ["ls", "-l"] and items[1].action.working_directory == "/w"
    assert items[2].action.commands == ["pwd"]
    assert items[3].operation.type == "delete_file" and items[3].operation.path == "a.py"
    events = [
        STREAM_EVENT.validate_json(frame.split("data: ", 1)[1])
        for frame in PROVIDERS[OPENAI_RESPONSES].render_stream(completion, request)
    ]
    done = [e.item for e in events if e.type == "response.output_item.done"]
    assert [i.type for i in done] == [i.type for i in items]
    assert events[-1].type == "response.completed"
    # The same items sent back as history, with their outputs, are the same calls for the template.
    history = [*output]
    history += [
        {"type": "function_call_output", "call_id": "c1", "output": "spawned"},
        {"type": "local_shell_call_output", "id": "c2", "output": "total 0"},
        {
            "type": "shell_call_output",
            "call_id": "c3",
            "output": [{"stdout": "/w\n", "stderr": "", "outcome": {"type": "exit", "exit_code": 0}}],
        },
        {"type": "apply_patch_call_output", "call_id": "c4", "status": "completed", "output": "deleted"},
    ]
    again = resp.parse_request({"model": "m", "input": history, "tools": tools})
    (assistant, *results) = again.messages
    assert [c["function"]["name"] for c in assistant["tool_calls"]] == [c.name for c in calls]
    assert [json.loads(c["function"]["arguments"]) for c in assistant["tool_calls"]] == [
        json.loads(c.arguments) for c in calls
    ]
    assert [(m["tool_call_id"], m["content"]) for m in results] == [
        ("c1", "spawned"),
        ("c2", "total 0"),
        ("c3", "/w\n\nexit code 0"),
        ("c4", "deleted"),
    ]


def test_anthropic_carries_client_and_server_tools_and_refuses_computer_use() -> None:
    tools = [
        {"name": "Read", "input_schema": {"type": "object"}},
        {"type": "custom", "name": "Write", "input_schema": {"type": "object"}},
        {"type": "bash_20250124", "name": "bash"},
        {"type": "text_editor_20250728", "name": "str_replace_based_edit_tool"},
        {"type": "memory_20250818", "name": "memory"},
        {"type": "web_search_20250305", "name": "web_search", "max_uses": 3},
        {"type": "web_fetch_20250910", "name": "web_fetch"},
        {"type": "code_execution_20250825", "name": "code_execution"},
        {"type": "tool_search_tool_regex_20251119", "name": "tool_search_tool_regex"},
    ]
    body = {"model": "c", "max_tokens": 5, "messages": [{"role": "user", "content": "hi"}], "tools": tools}
    request = anth.parse_request(body)
    assert _names(request.tools) == [t["name"] for t in tools]
    assert request.tools[2]["function"]["parameters"]["properties"]["command"]["type"] == "string"
    for kind in ("computer_20250124", "mcp_toolset", "mystery_20990101"):
        bad = {**body, "tools": [{"type": kind, "name": "x"}]}
        with pytest.raises(RequestError, match=rf"tools\[0\]: tool type '{kind}'"):
            anth.parse_request(bad)


def test_google_carries_declarations_and_built_ins_and_refuses_computer_use() -> None:
    tools = [
        {"functionDeclarations": [{"name": "read_file", "parameters": {"type": "OBJECT"}}]},
        {"googleSearch": {}},
        {"code_execution": {}},
        {"urlContext": {}},
    ]
    request = goog.parse_request({"contents": [], "tools": tools}, "gemini")
    assert _names(request.tools) == ["read_file", "google_search", "code_execution", "url_context"]
    assert request.tools[0]["function"]["parameters"] == {"type": "object"}
    for key in ("computerUse", "retrieval", "somethingNew"):
        with pytest.raises(RequestError, match=rf"tools\[0\]\.{key}: tool type '{key}'"):
            goog.parse_request({"contents": [], "tools": [{key: {}}]}, "gemini")


def test_chat_custom_tools_round_trip_and_unknown_types_are_refused() -> None:
    tools = [{"type": "custom", "custom": {"name": "patch", "description": "free text"}}]
    body = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "tools": tools}
    request = chat.parse_request(body)
    assert _names(request.tools) == ["patch"] and request.custom_tools == ["patch"]
    call = ToolCall(id="c", name="patch", arguments='{"input": "*** Begin Patch"}')
    completion = ChatCompletion(id="x", model="m", tool_calls=[call], finish_reason="tool_calls")
    reply = openai.types.chat.ChatCompletion.model_validate(chat.render_response(completion, request))
    sent = reply.choices[0].message.tool_calls[0]  # type: ignore[index]
    assert sent.type == "custom" and sent.custom.input == "*** Begin Patch"  # type: ignore[union-attr]
    history = [*body["messages"], reply.choices[0].message.model_dump(exclude_none=True)]  # type: ignore[list-item]
    again = chat.parse_request({**body, "messages": history})
    assert again.messages[-1]["tool_calls"][0]["function"] == {
        "name": "patch",
        "arguments": '{"input": "*** Begin Patch"}',
    }
    with pytest.raises(RequestError, match=r"tools\[0\]: tool type 'allowed_tools'"):
        chat.parse_request({**body, "tools": [{"type": "allowed_tools"}]})


def test_a_refused_tool_is_a_provider_shaped_400_naming_it(gateway: str, session: dict[str, str]) -> None:
    base = session["base_url"]
    answer = httpx.post(
        f"{base}/v1/responses",
        json={"model": "m", "input": "hi", "tools": [{"type": "mcp", "server_label": "x"}]},
    )
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["type"] == "invalid_request_error" and "tool type 'mcp'" in error["message"]
    messages = [{"role": "user", "content": "hi"}]
    answer = httpx.post(
        f"{base}/v1/messages",
        json={"model": "c", "max_tokens": 4, "messages": messages, "tools": [{"type": "computer_20250124"}]},
    )
    assert answer.status_code == 400 and answer.json()["type"] == "error"
    assert "computer_20250124" in answer.json()["error"]["message"]
    answer = httpx.post(
        f"{base}/v1/models/gemini:generateContent",
        json={"contents": [{"role": "user", "parts": [{"text": "hi"}]}], "tools": [{"computerUse": {}}]},
    )
    assert answer.status_code == 400 and answer.json()["error"]["status"] == "INVALID_ARGUMENT"
    assert "computerUse" in answer.json()["error"]["message"]
