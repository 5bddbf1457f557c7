"""OpenAI Responses: input items <-> chat messages, output items, and the response.* SSE sequence."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from farm.gateway.errors import GatewayError
from farm.gateway.normalized import ChatCompletion, ChatRequest, ToolCall, text_chunks
from farm.gateway.providers import openai_chat, tool_types
from farm.gateway.providers.base import RequestError
from farm.gateway.sse import sse_event


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


def _call_id(item: dict[str, Any]) -> str:
    return str(item.get("call_id") or item.get("id") or "")


def _flat_name(item: dict[str, Any]) -> str:
    """A namespaced tool's call as the model saw the function: `ns__name`."""
    name = str(item.get("name") or "")
    return f"{item['namespace']}__{name}" if item.get("namespace") else name


def _local_shell_arguments(item: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    action = item.get("action") or {}
    arguments = {"command": list(action.get("command") or [])}
    if action.get("working_directory"):
        arguments["workdir"] = action["working_directory"]
    if action.get("timeout_ms") is not None:
        arguments["timeout_ms"] = action["timeout_ms"]
    return "local_shell", arguments


def _shell_arguments(item: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    action = item.get("action") or {}
    return "shell", {k: v for k, v in action.items() if v is not None}


def _apply_patch_arguments(item: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    return "apply_patch", dict(item.get("operation") or {})


_NATIVE_CALLS = {
    "local_shell_call": _local_shell_arguments,
    "shell_call": _shell_arguments,
    "apply_patch_call": _apply_patch_arguments,
}


def _shell_output(item: dict[str, Any]) -> str:
    """shell_call_output carries chunks of {stdout, stderr, outcome}; the model reads them as text."""
    pieces: list[str] = []
    for chunk in item.get("output") or []:
        if not isinstance(chunk, dict):
            continue
        pieces += [chunk[k] for k in ("stdout", "stderr") if chunk.get(k)]
        outcome = chunk.get("outcome") or {}
        if outcome.get("type") == "exit":
            pieces.append(f"exit code {outcome.get('exit_code')}")
        elif outcome.get("type"):
            pieces.append(str(outcome["type"]))
    return "\n".join(pieces)


def _plain_output(item: dict[str, Any]) -> str:
    return _output_text(item.get("output"))


def _patch_output(item: dict[str, Any]) -> str:
    return str(item.get("output") or item.get("status") or "")


_OUTPUTS: dict[str, Callable[[dict[str, Any]], str]] = {
    "function_call_output": _plain_output,
    "custom_tool_call_output": _plain_output,
    "local_shell_call_output": _plain_output,
    "shell_call_output": _shell_output,
    "apply_patch_call_output": _patch_output,
}


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
            self.add_call(_call_id(item), _flat_name(item), item.get("arguments", ""))
        elif kind == "custom_tool_call":
            arguments = json.dumps({"input": item.get("input", "")}, ensure_ascii=False)
            self.add_call(_call_id(item), _flat_name(item), arguments)
        elif kind in _NATIVE_CALLS:
            tool, action = _NATIVE_CALLS[kind](item)
            self.add_call(_call_id(item), tool, json.dumps(action, ensure_ascii=False))
        elif kind in _OUTPUTS:
            content = _OUTPUTS[kind](item)
            self.messages.append({"role": "tool", "tool_call_id": _call_id(item), "content": content})
        elif kind == "reasoning":
            summary = "\n".join(s.get("text", "") for s in item.get("summary") or [])
            text = summary or _output_text(item.get("content"))
            if text:
                self.pending_reasoning.append(text)
        # item_reference, web_search_call, ... carry nothing a chat backend can use


# Hosted (server-run) tools carried as functions the model may call; the harness answers the call.
_HOSTED: dict[str, tuple[str, str, dict[str, Any]]] = {
    "web_search": ("web_search", "Search the web.", tool_types.QUERY),
    "web_search_2025_08_26": ("web_search", "Search the web.", tool_types.QUERY),
    "web_search_preview": ("web_search", "Search the web.", tool_types.QUERY),
    "web_search_preview_2025_03_11": ("web_search", "Search the web.", tool_types.QUERY),
    "file_search": ("file_search", "Search the attached files.", tool_types.QUERY),
    "code_interpreter": ("code_interpreter", "Run Python code.", tool_types.CODE),
    "image_generation": ("image_generation", "Generate an image.", tool_types.PROMPT),
}
# Client-run tools with their own call item types (`local_shell_call`, ...): carried as functions.
_NATIVE: dict[str, tuple[str, dict[str, Any]]] = {
    "local_shell": ("Run a command on the local machine.", tool_types.LOCAL_SHELL),
    "shell": ("Run shell commands.", tool_types.SHELL),
    "apply_patch": ("Create, update or delete a file with a diff.", tool_types.APPLY_PATCH),
}
_REFUSED = {
    "mcp": tool_types.REMOTE_MCP,
    "computer": tool_types.NEEDS_SCREENSHOTS,
    "computer_use_preview": tool_types.NEEDS_SCREENSHOTS,
    "programmatic_tool_calling": "the program runs on OpenAI's servers, which this gateway is not",
}


def _function(tool: dict[str, Any], name: str) -> dict[str, Any]:
    function = {
        "name": name,
        "description": tool.get("description") or "",
        "parameters": tool.get("parameters") or {"type": "object", "properties": {}},
    }
    if tool.get("strict") is not None:
        function["strict"] = tool["strict"]
    return {"type": "function", "function": function}


class _Tools:
    """The request's tools as chat functions, remembering which reply shape each function's calls take."""

    def __init__(self) -> None:
        self.functions: list[dict[str, Any]] = []
        self.custom: list[str] = []
        self.native: dict[str, str] = {}
        self.namespaced: dict[str, tuple[str, str]] = {}

    def add(self, tool: dict[str, Any], where: str, namespace: str | None = None) -> None:
        kind = tool.get("type")
        name = str(tool.get("name") or kind)
        flat = f"{namespace}__{name}" if namespace else name
        if namespace:
            self.namespaced[flat] = (namespace, name)
        if kind == "function":
            self.functions.append(_function(tool, flat))
        elif kind == "custom":
            self.custom.append(flat)
            params = tool_types.CUSTOM_INPUT
            self.functions.append(tool_types.function_tool(flat, tool.get("description") or "", params))
        elif kind == "namespace" and namespace is None:
            for index, inner in enumerate(tool.get("tools") or []):
                self.add(inner, f"{where}.tools[{index}]", namespace=name)
        elif kind in _NATIVE and namespace is None:
            description, parameters = _NATIVE[kind]
            self.native[kind] = kind
            self.functions.append(tool_types.function_tool(kind, description, parameters))
        elif kind in _HOSTED and namespace is None:
            hosted, description, parameters = _HOSTED[kind]
            if all(f["function"]["name"] != hosted for f in self.functions):
                self.functions.append(tool_types.function_tool(hosted, description, parameters))
        elif kind == "tool_search" and namespace is None:
            parameters = tool.get("parameters") or tool_types.QUERY
            description = tool.get("description") or "Search the deferred tools."
            self.functions.append(tool_types.function_tool("tool_search", description, parameters))
        else:
            raise tool_types.refuse(where, str(kind), _REFUSED.get(str(kind), tool_types.UNKNOWN))


def _tools(tools: list[dict[str, Any]]) -> _Tools:
    out = _Tools()
    for index, tool in enumerate(tools):
        if not isinstance(tool, dict):
            raise RequestError(f"tools[{index}] must be an object")
        out.add(tool, f"tools[{index}]")
    return out


def _tool_choice(choice: Any) -> str | dict[str, Any] | None:
    """A forced tool names the function the model sees; `allowed_tools` and the like fall back to auto."""
    if not isinstance(choice, dict):
        return choice if isinstance(choice, str) or choice is None else "auto"
    kind = choice.get("type")
    if kind in ("function", "custom"):
        name = str(choice.get("name", ""))
        return {"type": "function", "function": {"name": _flat_name({**choice, "name": name})}}
    if kind in _NATIVE or kind in _HOSTED:
        name = _HOSTED[kind][0] if kind in _HOSTED else kind
        return {"type": "function", "function": {"name": name}}
    return "auto"


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
    tools = _tools(body.get("tools") or [])
    choice = _tool_choice(body.get("tool_choice"))
    sampling: dict[str, Any] = {k: body[k] for k in ("temperature", "top_p") if body.get(k) is not None}
    if body.get("max_output_tokens") is not None:
        sampling["max_tokens"] = body["max_output_tokens"]
    return ChatRequest(
        model=str(body.get("model") or model or ""),
        messages=conversation.messages,
        tools=tools.functions,
        tool_choice=choice,
        parallel_tool_calls=body.get("parallel_tool_calls"),
        sampling=sampling,
        stream=bool(body.get("stream")),
        custom_tools=tools.custom,
        native_tools=tools.native,
        namespaced_tools=tools.namespaced,
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


def _native_item(kind: str, item_id: str, call: ToolCall) -> dict[str, Any]:
    arguments = call.parsed_arguments()
    action: dict[str, Any]
    if kind == "local_shell":
        action = {
            "type": "exec",
            "command": arguments.get("command") or [],
            "env": {},
            "timeout_ms": arguments.get("timeout_ms"),
            "working_directory": arguments.get("workdir"),
            "user": None,
        }
        return {"id": item_id, "type": "local_shell_call", "call_id": call.id, "action": action}
    if kind == "shell":
        keys = ("commands", "timeout_ms", "max_output_length")
        action = {k: arguments.get(k) for k in keys}
        action["commands"] = action["commands"] or []
        return {"id": item_id, "type": "shell_call", "call_id": call.id, "action": action}
    operation = {k: arguments[k] for k in ("type", "path", "diff") if k in arguments}
    return {"id": item_id, "type": "apply_patch_call", "call_id": call.id, "operation": operation}


def _call_item(completion_id: str, index: int, call: ToolCall, request: ChatRequest) -> dict[str, Any]:
    if call.name in request.native_tools:
        item = _native_item(request.native_tools[call.name], f"tc_{completion_id}_{index}", call)
        return {**item, "status": "completed"}
    namespace, name = request.namespaced_tools.get(call.name, (None, call.name))
    extra = {"namespace": namespace} if namespace else {}
    if call.name in request.custom_tools:
        raw = call.parsed_arguments().get("input")
        return {
            "id": f"ctc_{completion_id}_{index}",
            "type": "custom_tool_call",
            "call_id": call.id,
            "name": name,
            **extra,
            "input": raw if isinstance(raw, str) else call.arguments,
            "status": "completed",
        }
    return {
        "id": f"fc_{completion_id}_{index}",
        "type": "function_call",
        "call_id": call.id,
        "name": name,
        **extra,
        "arguments": call.arguments,
        "status": "completed",
    }


@dataclass(frozen=True)
class _TextItem:
    """How a streamed text item (a message, or reasoning) names its parts and their events."""

    parts: str
    part_index: str
    text_events: str
    part_events: str
    text_extra: dict[str, Any] = field(default_factory=dict)
    """Fields the text events carry besides the text."""


_TEXT_ITEMS = {
    "message": _TextItem(
        "content", "content_index", "response.output_text", "response.content_part", {"logprobs": []}
    ),
    "reasoning": _TextItem(
        "summary", "summary_index", "response.reasoning_summary_text", "response.reasoning_summary_part"
    ),
}


_STREAMED_CALL_FIELDS = {
    "function_call": ("arguments", "response.function_call_arguments", ("name",)),
    "custom_tool_call": ("input", "response.custom_tool_call_input", ()),
}
"""Call items whose text field streams in deltas: (field, event prefix, fields its .done also carries)."""


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
        kind = _TEXT_ITEMS[item["type"]]
        part = item[kind.parts][0]
        at = {"item_id": item_id, "output_index": index, kind.part_index: 0}
        return [
            self._emit(f"{kind.text_events}.done", **at, text=part["text"], **kind.text_extra),
            self._emit(f"{kind.part_events}.done", **at, part=part),
            self._emit("response.output_item.done", output_index=index, item=item),
        ]

    def _open(self, kind: str) -> list[str]:
        frames = self._close()
        index = len(self.items)
        suffix = f"_{index}" if any(i["type"] == kind for i in self.items) else ""
        text_item = _TEXT_ITEMS[kind]
        item: dict[str, Any]
        if kind == "message":
            part = {"type": "output_text", "text": "", "annotations": [], "logprobs": []}
            item = {
                "id": f"msg_{self.head.id}{suffix}",
                "type": "message",
                "role": "assistant",
                "status": "completed",
                "content": [part],
            }
            shown = {**item, "status": "in_progress", "content": []}
        else:
            part = {"type": "summary_text", "text": ""}
            item = {"id": f"rs_{self.head.id}{suffix}", "type": "reasoning", "summary": [part]}
            shown = {**item, "summary": []}
        frames.append(self._emit("response.output_item.added", output_index=index, item=shown))
        frames.append(
            self._emit(
                f"{text_item.part_events}.added",
                item_id=item["id"],
                output_index=index,
                **{text_item.part_index: 0},
                part=dict(part),
            )
        )
        self.items.append(item)
        self.open = item
        return frames

    def text(self, kind: str, text: str) -> list[str]:
        wanted = "reasoning" if kind == "reasoning" else "message"
        frames = [] if self.open is not None and self.open["type"] == wanted else self._open(wanted)
        item = self.items[-1]
        text_item = _TEXT_ITEMS[wanted]
        item[text_item.parts][0]["text"] += text
        at = {"item_id": item["id"], "output_index": len(self.items) - 1, text_item.part_index: 0}
        frames.append(self._emit(f"{text_item.text_events}.delta", **at, delta=text, **text_item.text_extra))
        return frames

    def tool_call(self, call: ToolCall) -> list[str]:
        frames = self._close()
        item = _call_item(self.head.id, self.calls, call, self.request)
        self.calls += 1
        index = len(self.items)
        self.items.append(item)
        streamed = _STREAMED_CALL_FIELDS.get(item["type"])
        if streamed is None:
            frames.append(
                self._emit(
                    "response.output_item.added", output_index=index, item={**item, "status": "in_progress"}
                )
            )
        else:
            name, events, also = streamed
            shown = {**item, name: "", "status": "in_progress"}
            frames.append(self._emit("response.output_item.added", output_index=index, item=shown))
            at = {"item_id": item["id"], "output_index": index}
            for piece in text_chunks(item[name], 256):
                frames.append(self._emit(f"{events}.delta", **at, delta=piece))
            done = {key: item[key] for key in (*also, name)}
            frames.append(self._emit(f"{events}.done", **at, **done))
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


def render_error(error: GatewayError) -> dict[str, Any]:
    return openai_chat.render_error(error)
