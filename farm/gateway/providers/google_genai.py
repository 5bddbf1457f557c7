"""Google generateContent: contents/parts <-> chat messages; candidates; the alt=sse chunk stream."""

from __future__ import annotations

import json
from collections import deque
from typing import Any

from farm.gateway.errors import ErrorKind, GatewayError
from farm.gateway.normalized import ChatCompletion, ChatRequest, ToolCall
from farm.gateway.providers import tool_types
from farm.gateway.providers.base import RequestError
from farm.gateway.sse import sse_data


def _lower_schema(schema: Any) -> Any:
    """Google schemas spell types in capitals ("OBJECT"); JSON Schema wants lower case."""
    if isinstance(schema, dict):
        out = {k: _lower_schema(v) for k, v in schema.items()}
        if isinstance(out.get("type"), str):
            out["type"] = out["type"].lower()
        return out
    if isinstance(schema, list):
        return [_lower_schema(v) for v in schema]
    return schema


def _synthetic_id(n: int) -> str:
    return f"call_{n}"


class _Conversation:
    """Maps contents to chat messages; calls without ids get ids by order, answered by name in order."""

    def __init__(self) -> None:
        self.messages: list[dict[str, Any]] = []
        self.calls = 0
        self.pending: deque[tuple[str, str]] = deque()

    def model_turn(self, parts: list[dict[str, Any]]) -> None:
        texts: list[str] = []
        thoughts: list[str] = []
        calls: list[dict[str, Any]] = []
        self.pending.clear()
        for part in parts:
            if "functionCall" in part:
                call = part["functionCall"]
                call_id = call.get("id") or _synthetic_id(self.calls)
                self.calls += 1
                self.pending.append((call_id, call.get("name", "")))
                arguments = json.dumps(call.get("args") or {}, ensure_ascii=False)
                calls.append(
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {"name": call.get("name", ""), "arguments": arguments},
                    }
                )
            elif "text" in part:
                (thoughts if part.get("thought") else texts).append(part["text"])
        message: dict[str, Any] = {
            "role": "assistant",
            "content": "".join(texts) if texts or not calls else None,
        }
        if thoughts:
            message["reasoning"] = "".join(thoughts)
        if calls:
            message["tool_calls"] = calls
        self.messages.append(message)

    def _answer_id(self, response: dict[str, Any]) -> str:
        if response.get("id"):
            self.pending = deque(p for p in self.pending if p[0] != response["id"])
            return str(response["id"])
        name = response.get("name", "")
        for i, (call_id, call_name) in enumerate(self.pending):
            if call_name == name:
                del self.pending[i]
                return call_id
        call_id = _synthetic_id(self.calls)
        self.calls += 1
        return call_id

    def user_turn(self, parts: list[dict[str, Any]]) -> None:
        texts: list[dict[str, Any]] = []
        for part in parts:
            if "functionResponse" in part:
                response = part["functionResponse"]
                payload = response.get("response")
                content = json.dumps(payload, ensure_ascii=False) if not isinstance(payload, str) else payload
                self.messages.append(
                    {"role": "tool", "tool_call_id": self._answer_id(response), "content": content}
                )
            elif "text" in part:
                texts.append({"type": "text", "text": part["text"]})
            elif "inlineData" in part:
                data = part["inlineData"]
                url = f"data:{data.get('mimeType', 'application/octet-stream')};base64,{data.get('data', '')}"
                texts.append({"type": "image_url", "image_url": {"url": url}})
        if texts:
            if all(t["type"] == "text" for t in texts):
                self.messages.append({"role": "user", "content": "".join(t["text"] for t in texts)})
            else:
                self.messages.append({"role": "user", "content": texts})


def _tool_choice(config: dict[str, Any]) -> str | dict[str, Any] | None:
    calling = config.get("functionCallingConfig") or {}
    mode = (calling.get("mode") or "").upper()
    allowed = calling.get("allowedFunctionNames") or []
    if mode == "ANY" and len(allowed) == 1:
        return {"type": "function", "function": {"name": allowed[0]}}
    return {"AUTO": "auto", "ANY": "required", "NONE": "none", "VALIDATED": "auto"}.get(mode)


# Built-in Gemini tools (camelCase and the snake_case the SDK also accepts), carried as functions the model
# may call; gemini_cli answers a call to a function it does not run with an error response.
_BUILT_IN: dict[str, tuple[str, str, dict[str, Any]]] = {
    "googleSearch": ("google_search", "Search the web with Google.", tool_types.QUERY),
    "googleSearchRetrieval": ("google_search", "Search the web with Google.", tool_types.QUERY),
    "enterpriseWebSearch": ("google_search", "Search the web.", tool_types.QUERY),
    "codeExecution": ("code_execution", "Run Python code.", tool_types.CODE),
    "urlContext": ("url_context", "Read the content of a URL.", tool_types.URL),
    "fileSearch": ("file_search", "Search the file stores.", tool_types.QUERY),
    "googleMaps": ("google_maps", "Search Google Maps.", tool_types.QUERY),
}
_REFUSED = {
    "computerUse": tool_types.NEEDS_SCREENSHOTS,
    "retrieval": "Vertex AI data stores are not reachable from this gateway",
}


def _camel(key: str) -> str:
    head, *rest = key.split("_")
    return head + "".join(w.title() for w in rest)


def _declaration(declaration: dict[str, Any]) -> dict[str, Any]:
    schema = (
        declaration.get("parametersJsonSchema")
        or declaration.get("parameters_json_schema")
        or declaration.get("parameters")
        or {"type": "object", "properties": {}}
    )
    return tool_types.function_tool(
        declaration["name"], declaration.get("description", ""), _lower_schema(schema)
    )


def _tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for index, tool in enumerate(tools):
        if not isinstance(tool, dict):
            raise RequestError(f"tools[{index}] must be an object")
        for key, value in tool.items():
            kind, where = _camel(key), f"tools[{index}].{key}"
            if kind == "functionDeclarations":
                out += [_declaration(d) for d in value or []]
            elif kind in _BUILT_IN:
                name, description, schema = _BUILT_IN[kind]
                if all(t["function"]["name"] != name for t in out):
                    out.append(tool_types.function_tool(name, description, schema))
            elif value is not None:
                raise tool_types.refuse(where, key, _REFUSED.get(kind, tool_types.UNKNOWN))
    return out


def parse_request(body: dict[str, Any], model: str | None = None) -> ChatRequest:
    contents = body.get("contents")
    if not isinstance(contents, list):
        raise RequestError("`contents` must be a list")
    conversation = _Conversation()
    system = body.get("systemInstruction") or body.get("system_instruction")
    if system:
        text = "".join(p.get("text", "") for p in system.get("parts") or [])
        if text:
            conversation.messages.append({"role": "system", "content": text})
    for content in contents:
        role = content.get("role", "user")
        parts = content.get("parts") or []
        if role == "model":
            conversation.model_turn(parts)
        elif role in ("user", "function", "tool"):
            conversation.user_turn(parts)
        else:
            raise RequestError(f"unsupported content role {role!r}")
    tools = _tools(body.get("tools") or [])
    config = body.get("generationConfig") or {}
    if int(config.get("candidateCount") or 1) != 1:
        raise RequestError("only candidateCount=1 is supported")
    sampling: dict[str, Any] = {}
    for ours, theirs in (
        ("temperature", "temperature"),
        ("top_p", "topP"),
        ("top_k", "topK"),
        ("max_tokens", "maxOutputTokens"),
        ("seed", "seed"),
        ("presence_penalty", "presencePenalty"),
        ("frequency_penalty", "frequencyPenalty"),
    ):
        if config.get(theirs) is not None:
            sampling[ours] = config[theirs]
    if config.get("stopSequences"):
        sampling["stop"] = list(config["stopSequences"])
    template: dict[str, Any] = {}
    thinking = config.get("thinkingConfig") or {}
    if thinking.get("thinkingBudget") == 0:
        template["enable_thinking"] = False
    elif thinking.get("includeThoughts") or thinking.get("thinkingBudget"):
        template["enable_thinking"] = True
    return ChatRequest(
        model=model or "",
        messages=conversation.messages,
        tools=tools,
        tool_choice=_tool_choice(body.get("toolConfig") or {}),
        sampling=sampling,
        chat_template_kwargs=template,
    )


_FINISH = {"stop": "STOP", "tool_calls": "STOP", "length": "MAX_TOKENS", "content_filter": "SAFETY"}


def _parts(completion: ChatCompletion) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    if completion.reasoning:
        parts.append({"text": completion.reasoning, "thought": True})
    if completion.content:
        parts.append({"text": completion.content})
    for call in completion.tool_calls:
        parts.append({"functionCall": {"id": call.id, "name": call.name, "args": call.parsed_arguments()}})
    return parts


def _envelope(
    completion: ChatCompletion, request: ChatRequest, parts: list[dict[str, Any]], final: bool
) -> dict[str, Any]:
    candidate: dict[str, Any] = {"content": {"role": "model", "parts": parts}, "index": 0}
    out: dict[str, Any] = {"candidates": [candidate], "modelVersion": request.model or completion.model}
    out["responseId"] = completion.id
    if final:
        candidate["finishReason"] = _FINISH[completion.finish_reason]
        usage = completion.usage
        out["usageMetadata"] = {
            "promptTokenCount": usage.prompt_tokens,
            "candidatesTokenCount": usage.completion_tokens,
            "totalTokenCount": usage.total_tokens,
            "cachedContentTokenCount": usage.cached_tokens,
        }
    return out


def render_response(completion: ChatCompletion, request: ChatRequest) -> dict[str, Any]:
    return _envelope(completion, request, _parts(completion), final=True)


# Google's servers end each event with CRLF CRLF; google-genai's _SseLineDecoder (google/genai/_api_client.py,
# google-genai 3.6.1) splits at CR, LF or CRLF, so this is what the SDK is written against.
_CRLF = "\r\n\r\n"


class StreamEncoder:
    """Partial GenerateContentResponses: a chunk per text piece as it arrives; function calls are held until
    the end so the last one carries finishReason (no empty trailing chunk needed for a call turn).

    `sse=False` frames the chunks as one JSON array (streamGenerateContent without `alt=sse`).
    """

    def __init__(self, head: ChatCompletion, request: ChatRequest, sse: bool = True) -> None:
        self.head = head
        self.request = request
        self.sse = sse
        self.calls: list[dict[str, Any]] = []
        self.sent = 0

    def _frame(self, chunk: dict[str, Any]) -> str:
        if self.sse:
            return sse_data(chunk, _CRLF)
        self.sent += 1
        return ("[" if self.sent == 1 else ",") + json.dumps(chunk, separators=(",", ":"))

    def start(self) -> list[str]:
        return []

    def text(self, kind: str, text: str) -> list[str]:
        part: dict[str, Any] = {"text": text, "thought": True} if kind == "reasoning" else {"text": text}
        return [self._frame(_envelope(self.head, self.request, [part], final=False))]

    def tool_call(self, call: ToolCall) -> list[str]:
        self.calls.append(
            {"functionCall": {"id": call.id, "name": call.name, "args": call.parsed_arguments()}}
        )
        return []

    def finish(self, completion: ChatCompletion) -> list[str]:
        last = [self.calls.pop()] if self.calls else [{"text": ""}]
        frames = [self._frame(_envelope(completion, self.request, [c], final=False)) for c in self.calls]
        frames.append(self._frame(_envelope(completion, self.request, last, final=True)))
        return frames if self.sse else [*frames, "]"]

    def error(self, error: GatewayError) -> list[str]:
        if self.sse:
            return [sse_data(render_error(error), _CRLF)]
        return [("[" if self.sent == 0 else ",") + json.dumps(render_error(error)) + "]"]


def render_error(error: GatewayError) -> dict[str, Any]:
    message = error.message
    if error.kind is ErrorKind.context_overflow and error.prompt_tokens and error.max_tokens:
        message = (
            f"The input token count ({error.prompt_tokens}) exceeds the maximum number of tokens allowed "
            f"({error.max_tokens})."
        )
    return {"error": {"code": error.status, "message": message, "status": error.names.google}}
