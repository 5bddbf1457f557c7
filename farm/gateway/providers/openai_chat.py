"""OpenAI Chat Completions: the normalised form itself, so translation is mostly validation and cleanup."""

from __future__ import annotations

import json
from typing import Any

from farm.gateway.errors import ErrorKind, GatewayError
from farm.gateway.normalized import SAMPLING_KEYS, ChatCompletion, ChatRequest, ToolCall, text_chunks
from farm.gateway.providers import tool_types
from farm.gateway.providers.base import RequestError
from farm.gateway.sse import sse_data

_ROLES = {"system", "user", "assistant", "tool", "developer", "function"}


def _normalise_message(message: dict[str, Any]) -> dict[str, Any]:
    role = message.get("role")
    if role not in _ROLES:
        raise RequestError(f"unsupported message role {role!r}")
    out = {k: v for k, v in message.items() if v is not None or k == "content"}
    if role == "developer":
        out["role"] = "system"
    if role == "assistant" and "reasoning_content" in out:
        out.setdefault("reasoning", out.pop("reasoning_content"))
    if role == "assistant" and isinstance(out.get("tool_calls"), list):
        out["tool_calls"] = [_function_call(c) for c in out["tool_calls"]]
    return out


def _tools(tools: list[Any]) -> tuple[list[dict[str, Any]], list[str]]:
    """`function` tools pass through; `custom` (free-text) tools become functions taking `{input}`."""
    out: list[dict[str, Any]] = []
    custom: list[str] = []
    for index, tool in enumerate(tools):
        if not isinstance(tool, dict):
            raise RequestError(f"tools[{index}] must be an object")
        kind = tool.get("type", "function")
        if kind == "function":
            out.append(tool)
        elif kind == "custom" and isinstance(tool.get("custom"), dict) and tool["custom"].get("name"):
            spec = tool["custom"]
            custom.append(spec["name"])
            description = spec.get("description") or ""
            out.append(tool_types.function_tool(spec["name"], description, tool_types.CUSTOM_INPUT))
        else:
            raise tool_types.refuse(f"tools[{index}]", str(kind), tool_types.UNKNOWN)
    return out, custom


def _function_call(call: Any) -> Any:
    """An earlier custom tool call (`{"type": "custom", "custom": {name, input}}`) in function form."""
    if not isinstance(call, dict) or call.get("type") != "custom":
        return call
    spec = call.get("custom") or {}
    arguments = json.dumps({"input": spec.get("input", "")}, ensure_ascii=False)
    function = {"name": spec.get("name", ""), "arguments": arguments}
    return {"id": call.get("id", ""), "type": "function", "function": function}


def _call_json(call: ToolCall, request: ChatRequest) -> dict[str, Any]:
    if call.name not in request.custom_tools:
        return call.to_openai()
    raw = call.parsed_arguments().get("input")
    custom = {"name": call.name, "input": raw if isinstance(raw, str) else call.arguments}
    return {"id": call.id, "type": "custom", "custom": custom}


def parse_request(body: dict[str, Any], model: str | None = None) -> ChatRequest:
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise RequestError("`messages` must be a non-empty list")
    if int(body.get("n") or 1) != 1:
        raise RequestError("only n=1 is supported")
    sampling = {k: body[k] for k in SAMPLING_KEYS if body.get(k) is not None}
    if body.get("max_completion_tokens") is not None:
        sampling["max_tokens"] = body["max_completion_tokens"]
    if isinstance(sampling.get("stop"), str):
        sampling["stop"] = [sampling["stop"]]
    tools, custom = _tools(body.get("tools") or [])
    stream_options = body.get("stream_options") or {}
    return ChatRequest(
        model=str(body.get("model") or model or ""),
        messages=[_normalise_message(m) for m in messages],
        tools=tools,
        tool_choice=body.get("tool_choice"),
        parallel_tool_calls=body.get("parallel_tool_calls"),
        sampling=sampling,
        chat_template_kwargs=dict(body.get("chat_template_kwargs") or {}),
        stream=bool(body.get("stream")),
        include_usage=bool(stream_options.get("include_usage")),
        custom_tools=custom,
    )


def _usage(completion: ChatCompletion) -> dict[str, Any]:
    usage = completion.usage
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.total_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cached_tokens},
    }


def render_response(completion: ChatCompletion, request: ChatRequest) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": completion.content}
    if completion.reasoning is not None:
        message["reasoning_content"] = completion.reasoning
    if completion.tool_calls:
        message["tool_calls"] = [_call_json(c, request) for c in completion.tool_calls]
    return {
        "id": completion.id,
        "object": "chat.completion",
        "created": completion.created,
        "model": request.model or completion.model,
        "choices": [
            {"index": 0, "message": message, "finish_reason": completion.finish_reason, "logprobs": None}
        ],
        "usage": _usage(completion),
    }


_TEXT_TAIL = ',"finish_reason":null,"logprobs":null}]}\n\n'


class StreamEncoder:
    """Chat chunks as the upstream produces them: deltas pass through, each tool call goes out whole."""

    def __init__(self, head: ChatCompletion, request: ChatRequest) -> None:
        self.head = {
            "id": head.id,
            "object": "chat.completion.chunk",
            "created": head.created,
            "model": request.model or head.model,
        }
        self.request = request
        self.calls = 0
        self._head_json: str | None = None

    def _chunk(self, delta: dict[str, Any], finish: str | None = None) -> str:
        choice = {"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}
        return sse_data({**self.head, "choices": [choice]})

    def start(self) -> list[str]:
        return [self._chunk({"role": "assistant", "content": ""})]

    def text(self, kind: str, text: str) -> list[str]:
        # The hot frame, spliced from pre-encoded parts: the same bytes as `_chunk({key: text})`.
        key = "reasoning_content" if kind == "reasoning" else "content"
        return [f'{self._text_head}{{"{key}":{json.dumps(text)}}}{_TEXT_TAIL}']

    @property
    def _text_head(self) -> str:
        if self._head_json is None:
            self._head_json = "data: " + json.dumps(self.head, separators=(",", ":"))[:-1]
            self._head_json += ',"choices":[{"index":0,"delta":'
        return self._head_json

    def tool_call(self, call: ToolCall) -> list[str]:
        index, self.calls = self.calls, self.calls + 1
        if call.name in self.request.custom_tools:
            return [self._chunk({"tool_calls": [{"index": index, **_call_json(call, self.request)}]})]
        opening = {"index": index, "id": call.id, "type": "function"}
        opening["function"] = {"name": call.name, "arguments": ""}
        frames = [self._chunk({"tool_calls": [opening]})]
        for piece in text_chunks(call.arguments, 256):
            frames.append(self._chunk({"tool_calls": [{"index": index, "function": {"arguments": piece}}]}))
        return frames

    def finish(self, completion: ChatCompletion) -> list[str]:
        frames = [self._chunk({}, completion.finish_reason)]
        if self.request.include_usage:
            frames.append(sse_data({**self.head, "choices": [], "usage": _usage(completion)}))
        return [*frames, sse_data("[DONE]")]

    def error(self, error: GatewayError) -> list[str]:
        return [sse_data(render_error(error))]


def render_error(error: GatewayError) -> dict[str, Any]:
    code: str | None = {
        ErrorKind.context_overflow: "context_length_exceeded",
        ErrorKind.not_found: "not_found",
    }.get(error.kind)
    return {
        "error": {
            "message": error.message,
            "type": error.names.openai,
            "param": "messages" if error.kind is ErrorKind.context_overflow else None,
            "code": code,
        }
    }
