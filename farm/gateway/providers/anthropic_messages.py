"""Anthropic Messages: content blocks <-> chat messages, `stop_reason`, and the message_* SSE sequence."""

from __future__ import annotations

import json
from typing import Any

from farm.gateway.errors import ErrorKind, GatewayError
from farm.gateway.normalized import ChatCompletion, ChatRequest, ToolCall, text_chunks
from farm.gateway.providers import tool_types
from farm.gateway.providers.base import RequestError
from farm.gateway.sse import sse_event


def _text_of(content: Any) -> str:
    """Join the text of a string or a list of blocks (images and documents carry no text)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    return "\n".join(b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text")


def _image_part(block: dict[str, Any]) -> dict[str, Any] | None:
    source = block.get("source") or {}
    if source.get("type") == "base64":
        url = f"data:{source.get('media_type', 'image/png')};base64,{source.get('data', '')}"
    elif source.get("type") == "url":
        url = source.get("url", "")
    else:
        return None
    return {"type": "image_url", "image_url": {"url": url}}


def _user_messages(content: Any) -> list[dict[str, Any]]:
    """tool_result blocks become consecutive `tool` messages first, then one user message for the rest."""
    if isinstance(content, str):
        return [{"role": "user", "content": content}]
    tool_messages: list[dict[str, Any]] = []
    parts: list[dict[str, Any]] = []
    for block in content or []:
        kind = block.get("type")
        if kind == "tool_result":
            tool_messages.append(
                {
                    "role": "tool",
                    "tool_call_id": block.get("tool_use_id", ""),
                    "content": _text_of(block.get("content")),
                }
            )
        elif kind == "text":
            parts.append({"type": "text", "text": block.get("text", "")})
        elif kind == "image":
            image = _image_part(block)
            if image:
                parts.append(image)
        elif kind == "document":
            source = block.get("source") or {}
            if source.get("type") == "text":
                parts.append({"type": "text", "text": source.get("data", "")})
    out = tool_messages
    if parts:
        only_text = all(p["type"] == "text" for p in parts)
        text = "\n".join(p["text"] for p in parts) if only_text else None
        out.append({"role": "user", "content": text if only_text else parts})
    return out


def _assistant_message(content: Any) -> dict[str, Any]:
    if isinstance(content, str):
        return {"role": "assistant", "content": content}
    texts: list[str] = []
    thinking: list[str] = []
    calls: list[dict[str, Any]] = []
    for block in content or []:
        kind = block.get("type")
        if kind == "text":
            texts.append(block.get("text", ""))
        elif kind == "thinking":
            thinking.append(block.get("thinking", ""))
        elif kind == "tool_use":
            arguments = json.dumps(block.get("input") or {}, ensure_ascii=False)
            calls.append(
                {
                    "id": block.get("id", ""),
                    "type": "function",
                    "function": {"name": block.get("name", ""), "arguments": arguments},
                }
            )
    message: dict[str, Any] = {"role": "assistant", "content": "".join(texts) if texts or not calls else None}
    if thinking:
        message["reasoning"] = "\n".join(thinking)
    if calls:
        message["tool_calls"] = calls
    return message


def _tool_choice(choice: dict[str, Any] | None) -> tuple[str | dict[str, Any] | None, bool | None]:
    if not choice:
        return None, None
    parallel = False if choice.get("disable_parallel_tool_use") else None
    kind = choice.get("type")
    if kind == "any":
        return "required", parallel
    if kind == "tool":
        return {"type": "function", "function": {"name": choice.get("name", "")}}, parallel
    if kind in ("auto", "none"):
        return kind, parallel
    raise RequestError(f"unsupported tool_choice type {kind!r}")


# Anthropic-defined tools by type prefix (the suffix is a version date: bash_20250124, web_search_20250305).
# Client tools (bash, text_editor, memory) and server tools (web_search, web_fetch, code_execution,
# tool_search) are carried as functions with the schema Anthropic documents; the model's call comes back as
# a tool_use block the harness answers (claude_code answers a server tool it does not run with an error).
_VERSIONED: dict[str, tuple[str, dict[str, Any]]] = {
    "bash_": ("Run a command in a persistent bash shell.", tool_types.BASH),
    "text_editor_": ("View, create and edit files.", tool_types.TEXT_EDITOR),
    "memory_": ("Read and write files in the memory directory.", tool_types.MEMORY),
    "web_search_": ("Search the web.", tool_types.QUERY),
    "web_fetch_": ("Fetch the content of a URL.", tool_types.URL),
    "code_execution_": ("Run code in a sandbox.", tool_types.CODE),
    "tool_search_tool_": ("Search the deferred tools.", tool_types.QUERY),
}
_REFUSED = {"computer_": tool_types.NEEDS_SCREENSHOTS, "mcp_toolset": tool_types.REMOTE_MCP}


def _tool(tool: dict[str, Any], where: str) -> dict[str, Any]:
    if not isinstance(tool, dict):
        raise RequestError(f"{where} must be an object")
    kind = str(tool.get("type") or "custom")
    if kind == "custom":
        if not tool.get("name"):
            raise RequestError(f"{where}.name is required")
        schema = tool.get("input_schema") or {"type": "object", "properties": {}}
        return tool_types.function_tool(tool["name"], tool.get("description", ""), schema)
    for prefix, (description, schema) in _VERSIONED.items():
        if kind.startswith(prefix):
            name = str(tool.get("name") or prefix.rstrip("_"))
            return tool_types.function_tool(name, description, schema)
    reason = next((r for p, r in _REFUSED.items() if kind.startswith(p)), tool_types.UNKNOWN)
    raise tool_types.refuse(where, kind, reason)


def parse_request(body: dict[str, Any], model: str | None = None) -> ChatRequest:
    raw_messages = body.get("messages")
    if not isinstance(raw_messages, list):
        raise RequestError("`messages` must be a list")
    messages: list[dict[str, Any]] = []
    system = _text_of(body.get("system"))
    if system:
        messages.append({"role": "system", "content": system})
    for message in raw_messages:
        role = message.get("role")
        if role == "user":
            messages.extend(_user_messages(message.get("content")))
        elif role == "assistant":
            messages.append(_assistant_message(message.get("content")))
        else:
            raise RequestError(f"unsupported message role {role!r}")
    tools = [_tool(t, f"tools[{i}]") for i, t in enumerate(body.get("tools") or [])]
    tool_choice, parallel = _tool_choice(body.get("tool_choice"))
    sampling: dict[str, Any] = {}
    for ours, theirs in (("max_tokens", "max_tokens"), ("temperature", "temperature"), ("top_p", "top_p")):
        if body.get(theirs) is not None:
            sampling[ours] = body[theirs]
    if body.get("top_k") is not None:
        sampling["top_k"] = body["top_k"]
    if body.get("stop_sequences"):
        sampling["stop"] = list(body["stop_sequences"])
    template: dict[str, Any] = {}
    thinking = body.get("thinking") or {}
    if thinking.get("type") in ("enabled", "adaptive"):
        template["enable_thinking"] = True
    elif thinking.get("type") == "disabled":
        template["enable_thinking"] = False
    return ChatRequest(
        model=str(body.get("model") or model or ""),
        messages=messages,
        tools=tools,
        tool_choice=tool_choice,
        parallel_tool_calls=parallel,
        sampling=sampling,
        chat_template_kwargs=template,
        stream=bool(body.get("stream")),
    )


def stop_reason(completion: ChatCompletion) -> str:
    # Any tool_use block means the turn stopped for tool use, whatever the backend reported.
    if completion.tool_calls:
        return "tool_use"
    if completion.finish_reason == "length":
        return "max_tokens"
    if completion.finish_reason == "content_filter":
        return "refusal"
    return "stop_sequence" if completion.stop_sequence else "end_turn"


def _blocks(completion: ChatCompletion) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    if completion.reasoning:
        blocks.append({"type": "thinking", "thinking": completion.reasoning, "signature": ""})
    if completion.content:
        blocks.append({"type": "text", "text": completion.content})
    for call in completion.tool_calls:
        blocks.append(
            {"type": "tool_use", "id": call.id, "name": call.name, "input": call.parsed_arguments()}
        )
    return blocks


def _usage(completion: ChatCompletion, output_tokens: int) -> dict[str, Any]:
    usage = completion.usage
    return {
        "input_tokens": usage.prompt_tokens - usage.cached_tokens,
        "output_tokens": output_tokens,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": usage.cached_tokens,
    }


def _message_id(completion: ChatCompletion) -> str:
    return completion.id if completion.id.startswith("msg_") else f"msg_{completion.id}"


def render_response(completion: ChatCompletion, request: ChatRequest) -> dict[str, Any]:
    return {
        "id": _message_id(completion),
        "type": "message",
        "role": "assistant",
        "model": request.model or completion.model,
        "content": _blocks(completion),
        "stop_reason": stop_reason(completion),
        "stop_sequence": completion.stop_sequence,
        "usage": _usage(completion, completion.usage.completion_tokens),
    }


class StreamEncoder:
    """The message_* event sequence, block by block as the upstream produces text; tool_use blocks whole."""

    def __init__(self, head: ChatCompletion, request: ChatRequest) -> None:
        self.head = head
        self.request = request
        self.index = -1
        self.open: str | None = None
        """The kind of the content block currently open ("thinking", "text"), if any."""

    def start(self) -> list[str]:
        start = render_response(self.head, self.request)
        start.update(content=[], stop_reason=None, stop_sequence=None, usage=_usage(self.head, 1))
        return [
            sse_event("message_start", {"type": "message_start", "message": start}),
            sse_event("ping", {"type": "ping"}),
        ]

    def _close(self) -> list[str]:
        if self.open is None:
            return []
        frames = []
        if self.open == "thinking":
            frames.append(self._delta({"type": "signature_delta", "signature": ""}))
        self.open = None
        return [*frames, sse_event("content_block_stop", {"type": "content_block_stop", "index": self.index})]

    def _open(self, block: dict[str, Any]) -> list[str]:
        frames = self._close()
        self.index += 1
        self.open = block["type"]
        payload = {"type": "content_block_start", "index": self.index, "content_block": block}
        return [*frames, sse_event("content_block_start", payload)]

    def _delta(self, delta: dict[str, Any]) -> str:
        payload = {"type": "content_block_delta", "index": self.index, "delta": delta}
        return sse_event("content_block_delta", payload)

    def text(self, kind: str, text: str) -> list[str]:
        frames: list[str] = []
        if kind == "reasoning":
            if self.open != "thinking":
                frames += self._open({"type": "thinking", "thinking": "", "signature": ""})
            return [*frames, self._delta({"type": "thinking_delta", "thinking": text})]
        if self.open != "text":
            frames += self._open({"type": "text", "text": ""})
        return [*frames, self._delta({"type": "text_delta", "text": text})]

    def tool_call(self, call: ToolCall) -> list[str]:
        frames = self._open({"type": "tool_use", "id": call.id, "name": call.name, "input": {}})
        arguments = json.dumps(call.parsed_arguments(), ensure_ascii=False)
        for piece in text_chunks(arguments, 256):
            frames.append(self._delta({"type": "input_json_delta", "partial_json": piece}))
        return frames + self._close_tool()

    def _close_tool(self) -> list[str]:
        self.open = None
        return [sse_event("content_block_stop", {"type": "content_block_stop", "index": self.index})]

    def finish(self, completion: ChatCompletion) -> list[str]:
        delta = {"stop_reason": stop_reason(completion), "stop_sequence": completion.stop_sequence}
        usage = _usage(completion, completion.usage.completion_tokens)
        return [
            *self._close(),
            sse_event("message_delta", {"type": "message_delta", "delta": delta, "usage": usage}),
            sse_event("message_stop", {"type": "message_stop"}),
        ]

    def error(self, error: GatewayError) -> list[str]:
        return [sse_event("error", render_error(error))]


def render_error(error: GatewayError) -> dict[str, Any]:
    message = error.message
    if error.kind is ErrorKind.context_overflow:
        # Claude Code recognises this wording and compacts its context.
        if error.prompt_tokens and error.max_tokens:
            message = f"prompt is too long: {error.prompt_tokens} tokens > {error.max_tokens} maximum"
        else:
            message = f"prompt is too long: {error.message}"
    return {"type": "error", "error": {"type": error.names.anthropic, "message": message}}
