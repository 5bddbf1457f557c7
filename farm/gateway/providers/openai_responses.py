"""OpenAI Responses: input items <-> chat messages, output items, and the response.* SSE sequence."""

from __future__ import annotations

import json
from typing import Any

from farm.gateway.errors import GatewayError
from farm.gateway.normalized import ChatCompletion, ChatRequest, ToolCall, text_chunks
from farm.gateway.providers import openai_chat
from farm.gateway.providers.base import RequestError, synthesize
from farm.gateway.sse import sse_event

_CUSTOM_PARAMETERS = {
    "type": "object",
    "properties": {"input": {"type": "string", "description": "The raw tool input."}},
    "required": ["input"],
}


def _content(content: Any) -> str | list[dict[str, Any]]:
    if isinstance(content, str):
        return content
    parts: list[dict[str, Any]] = []
    for part in content or []:
        kind = part.get("type")
        if kind in ("input_text", "output_text", "text", "summary_text"):
            parts.append({"type": "text", "text": part.get("text", "")})
        elif kind == "input_image" and part.get("image_url"):
            parts.append({"type": "image_url", "image_url": {"url": part["image_url"]}})
        elif kind == "refusal":
            parts.append({"type": "text", "text": part.get("refusal", "")})
    if all(p["type"] == "text" for p in parts):
        return "".join(p["text"] for p in parts)
    return parts


def _output_text(output: Any) -> str:
    text = _content(output)
    return text if isinstance(text, str) else json.dumps(text, ensure_ascii=False)


class _Conversation:
    """Folds Responses items into chat messages; one assistant turn may span several items."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.pending_reasoning: list[str] = []

    def _assistant(self) -> dict[str, Any]:
        last = self.messages[-1] if self.messages else None
        if last is None or last["role"] != "assistant":
            last = {"role": "assistant", "content": None}
            self.messages.append(last)
        if self.pending_reasoning:
            last["reasoning"] = "\n".join(self.pending_reasoning)
            self.pending_reasoning = []
        return last

    def add_call(self, call_id: str, name: str, arguments: str) -> None:
        call = {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
        self._assistant().setdefault("tool_calls", []).append(call)

    def add(self, item: dict[str, Any]) -> None:
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role", "user")
            role = "system" if role == "developer" else role
            if role == "assistant":
                message = self._assistant()
                text = _output_text(item.get("content"))
                message["content"] = (message.get("content") or "") + text
            else:
                self.messages.append({"role": role, "content": _content(item.get("content"))})
        elif kind == "function_call":
            self.add_call(
                item.get("call_id") or item.get("id", ""), item.get("name", ""), item.get("arguments", "")
            )
        elif kind == "custom_tool_call":
            arguments = json.dumps({"input": item.get("input", "")}, ensure_ascii=False)
            self.add_call(item.get("call_id") or item.get("id", ""), item.get("name", ""), arguments)
        elif kind in ("function_call_output", "custom_tool_call_output"):
            content = _output_text(item.get("output"))
            self.messages.append(
                {"role": "tool", "tool_call_id": item.get("call_id", ""), "content": content}
            )
        elif kind == "reasoning":
            summary = "\n".join(s.get("text", "") for s in item.get("summary") or [])
            text = summary or _output_text(item.get("content"))
            if text:
                self.pending_reasoning.append(text)
        # item_reference, web_search_call, ... carry nothing a chat backend can use


def _tools(tools: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[str]]:
    out: list[dict[str, Any]] = []
    custom: list[str] = []
    for tool in tools:
        kind = tool.get("type")
        if kind == "function":
            function = {
                "name": tool["name"],
                "description": tool.get("description") or "",
                "parameters": tool.get("parameters") or {"type": "object", "properties": {}},
            }
            if tool.get("strict") is not None:
                function["strict"] = tool["strict"]
            out.append({"type": "function", "function": function})
        elif kind == "custom":
            custom.append(tool["name"])
            description = tool.get("description") or ""
            out.append(
                {
                    "type": "function",
                    "function": {
                        "name": tool["name"],
                        "description": description,
                        "parameters": _CUSTOM_PARAMETERS,
                    },
                }
            )
    return out, custom


def parse_request(body: dict[str, Any], model: str | None = None) -> ChatRequest:
    if body.get("previous_response_id"):
        raise RequestError("previous_response_id is not supported: send the full input (store=false)")
    conversation = _Conversation()
    if body.get("instructions"):
        conversation.messages.append({"role": "system", "content": body["instructions"]})
    raw = body.get("input")
    if isinstance(raw, str):
        conversation.messages.append({"role": "user", "content": raw})
    elif isinstance(raw, list):
        for item in raw:
            conversation.add(item)
    else:
        raise RequestError("`input` must be a string or a list of items")
    tools, custom = _tools(body.get("tools") or [])
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and choice.get("type") in ("function", "custom"):
        choice = {"type": "function", "function": {"name": choice.get("name", "")}}
    elif isinstance(choice, dict):
        choice = "auto"
    sampling: dict[str, Any] = {k: body[k] for k in ("temperature", "top_p") if body.get(k) is not None}
    if body.get("max_output_tokens") is not None:
        sampling["max_tokens"] = body["max_output_tokens"]
    return ChatRequest(
        model=str(body.get("model") or model or ""),
        messages=conversation.messages,
        tools=tools,
        tool_choice=choice,
        parallel_tool_calls=body.get("parallel_tool_calls"),
        sampling=sampling,
        stream=bool(body.get("stream")),
        custom_tools=custom,
    )


def _output_items(completion: ChatCompletion, request: ChatRequest) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    if completion.reasoning:
        items.append(
            {
                "id": f"rs_{completion.id}",
                "type": "reasoning",
                "summary": [{"type": "summary_text", "text": completion.reasoning}],
            }
        )
    if completion.content:
        items.append(
            {
                "id": f"msg_{completion.id}",
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": [
                    {"type": "output_text", "text": completion.content, "annotations": [], "logprobs": []}
                ],
            }
        )
    for index, call in enumerate(completion.tool_calls):
        items.append(_call_item(completion.id, index, call, request))
    return items


def _response(
    completion: ChatCompletion, request: ChatRequest, status: str, output: list[Any]
) -> dict[str, Any]:
    usage = completion.usage
    incomplete = status == "incomplete"
    return {
        "id": f"resp_{completion.id}",
        "object": "response",
        "created_at": completion.created,
        "status": status,
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
        "instructions": None,
        "metadata": {},
        "model": request.model or completion.model,
        "output": output,
        "parallel_tool_calls": request.parallel_tool_calls is not False,
        "temperature": request.sampling.get("temperature"),
        "top_p": request.sampling.get("top_p"),
        "max_output_tokens": request.sampling.get("max_tokens"),
        "tool_choice": "auto",
        "tools": [],
        "usage": {
            "input_tokens": usage.prompt_tokens,
            "input_tokens_details": {"cached_tokens": usage.cached_tokens, "cache_write_tokens": 0},
            "output_tokens": usage.completion_tokens,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": usage.total_tokens,
        },
    }


def _status(completion: ChatCompletion) -> str:
    return "incomplete" if completion.finish_reason == "length" else "completed"


def render_response(completion: ChatCompletion, request: ChatRequest) -> dict[str, Any]:
    return _response(completion, request, _status(completion), _output_items(completion, request))


def _call_item(completion_id: str, index: int, call: ToolCall, request: ChatRequest) -> dict[str, Any]:
    if call.name in request.custom_tools:
        raw = call.parsed_arguments().get("input")
        return {
            "id": f"ctc_{completion_id}_{index}",
            "type": "custom_tool_call",
            "call_id": call.id,
            "name": call.name,
            "input": raw if isinstance(raw, str) else call.arguments,
            "status": "completed",
        }
    return {
        "id": f"fc_{completion_id}_{index}",
        "type": "function_call",
        "call_id": call.id,
        "name": call.name,
        "arguments": call.arguments,
        "status": "completed",
    }


class StreamEncoder:
    """The response.* event sequence: reasoning and message items grow as text arrives; calls go whole."""

    def __init__(self, head: ChatCompletion, request: ChatRequest) -> None:
        self.head = head
        self.request = request
        self.sequence = 0
        self.items: list[dict[str, Any]] = []
        self.open: dict[str, Any] | None = None
        self.calls = 0

    def _emit(self, kind: str, **payload: Any) -> str:
        frame = sse_event(kind, {"type": kind, "sequence_number": self.sequence, **payload})
        self.sequence += 1
        return frame

    def start(self) -> list[str]:
        pending = _response(self.head, self.request, "in_progress", [])
        pending["usage"] = None
        return [
            self._emit("response.created", response=pending),
            self._emit("response.in_progress", response=pending),
        ]

    def _close(self) -> list[str]:
        item, self.open = self.open, None
        if item is None:
            return []
        index, item_id = len(self.items) - 1, item["id"]
        if item["type"] == "message":
            part = item["content"][0]
            text = part["text"]
            frames = [
                self._emit(
                    "response.output_text.done",
                    item_id=item_id,
                    output_index=index,
                    content_index=0,
                    text=text,
                    logprobs=[],
                ),
                self._emit(
                    "response.content_part.done",
                    item_id=item_id,
                    output_index=index,
                    content_index=0,
                    part=part,
                ),
            ]
        else:
            part = item["summary"][0]
            frames = [
                self._emit(
                    "response.reasoning_summary_text.done",
                    item_id=item_id,
                    output_index=index,
                    summary_index=0,
                    text=part["text"],
                ),
                self._emit(
                    "response.reasoning_summary_part.done",
                    item_id=item_id,
                    output_index=index,
                    summary_index=0,
                    part=part,
                ),
            ]
        return [*frames, self._emit("response.output_item.done", output_index=index, item=item)]

    def _open(self, kind: str) -> list[str]:
        frames = self._close()
        index = len(self.items)
        suffix = f"_{index}" if any(i["type"] == kind for i in self.items) else ""
        if kind == "message":
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            item: dict[str, Any] = {
                "id": f"msg_{self.head.id}{suffix}",
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": [part],
            }
            shown = {**item, "status": "in_progress", "content": []}
            frames.append(self._emit("response.output_item.added", output_index=index, item=shown))
            frames.append(
                self._emit(
                    "response.content_part.added",
                    item_id=item["id"],
                    output_index=index,
                    content_index=0,
                    part=dict(part),
                )
            )
        else:
            item = {
                "id": f"rs_{self.head.id}{suffix}",
                "type": "reasoning",
                "summary": [{"type": "summary_text", "text": ""}],
            }
            frames.append(
                self._emit("response.output_item.added", output_index=index, item={**item, "summary": []})
            )
            frames.append(
                self._emit(
                    "response.reasoning_summary_part.added",
                    item_id=item["id"],
                    output_index=index,
                    summary_index=0,
                    part={"type": "summary_text", "text": ""},
                )
            )
        self.items.append(item)
        self.open = item
        return frames

    def text(self, kind: str, text: str) -> list[str]:
        wanted = "reasoning" if kind == "reasoning" else "message"
        frames = [] if self.open is not None and self.open["type"] == wanted else self._open(wanted)
        item = self.items[-1]
        index = len(self.items) - 1
        if wanted == "message":
            item["content"][0]["text"] += text
            frames.append(
                self._emit(
                    "response.output_text.delta",
                    item_id=item["id"],
                    output_index=index,
                    content_index=0,
                    delta=text,
                    logprobs=[],
                )
            )
        else:
            item["summary"][0]["text"] += text
            frames.append(
                self._emit(
                    "response.reasoning_summary_text.delta",
                    item_id=item["id"],
                    output_index=index,
                    summary_index=0,
                    delta=text,
                )
            )
        return frames

    def tool_call(self, call: ToolCall) -> list[str]:
        frames = self._close()
        item = _call_item(self.head.id, self.calls, call, self.request)
        self.calls += 1
        index = len(self.items)
        self.items.append(item)
        item_id = item["id"]
        if item["type"] == "function_call":
            shown = {**item, "arguments": "", "status": "in_progress"}
            frames.append(self._emit("response.output_item.added", output_index=index, item=shown))
            for piece in text_chunks(item["arguments"], 256):
                frames.append(
                    self._emit(
                        "response.function_call_arguments.delta",
                        item_id=item_id,
                        output_index=index,
                        delta=piece,
                    )
                )
            frames.append(
                self._emit(
                    "response.function_call_arguments.done",
                    item_id=item_id,
                    output_index=index,
                    name=item["name"],
                    arguments=item["arguments"],
                )
            )
        else:
            shown = {**item, "input": "", "status": "in_progress"}
            frames.append(self._emit("response.output_item.added", output_index=index, item=shown))
            for piece in text_chunks(item["input"], 256):
                frames.append(
                    self._emit(
                        "response.custom_tool_call_input.delta",
                        item_id=item_id,
                        output_index=index,
                        delta=piece,
                    )
                )
            frames.append(
                self._emit(
                    "response.custom_tool_call_input.done",
                    item_id=item_id,
                    output_index=index,
                    input=item["input"],
                )
            )
        return [*frames, self._emit("response.output_item.done", output_index=index, item=item)]

    def finish(self, completion: ChatCompletion) -> list[str]:
        frames = self._close()
        status = _status(completion)
        final = _response(completion, self.request, status, self.items)
        kind = "response.incomplete" if status == "incomplete" else "response.completed"
        return [*frames, self._emit(kind, response=final)]

    def error(self, error: GatewayError) -> list[str]:
        body = render_error(error)["error"]
        return [self._emit("error", code=body["code"], message=body["message"], param=body["param"])]


def render_stream(completion: ChatCompletion, request: ChatRequest) -> list[str]:
    return synthesize(StreamEncoder(completion, request), completion)


def render_error(error: GatewayError) -> dict[str, Any]:
    return openai_chat.render_error(error)
