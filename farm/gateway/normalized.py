"""The provider-neutral shapes every translator maps to and from (OpenAI chat vocabulary)."""

from __future__ import annotations

import json
import time
from typing import Any, Literal

from pydantic import BaseModel, Field

FinishReason = Literal["stop", "length", "tool_calls", "content_filter"]

# Request keys that go upstream as sampling / decoding controls when a translator sets them.
SAMPLING_KEYS = (
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "max_tokens",
    "stop",
    "seed",
    "presence_penalty",
    "frequency_penalty",
    "repetition_penalty",
)


class ToolCall(BaseModel):
    id: str
    name: str
    arguments: str
    """JSON text exactly as the model produced it (may be invalid JSON)."""

    def parsed_arguments(self) -> dict[str, Any]:
        """Arguments as an object; text that is not a JSON object is kept visible instead of repaired."""
        try:
            value = json.loads(self.arguments) if self.arguments.strip() else {}
        except json.JSONDecodeError:
            return {"__invalid_arguments__": self.arguments}
        return value if isinstance(value, dict) else {"__invalid_arguments__": self.arguments}

    def to_openai(self) -> dict[str, Any]:
        function = {"name": self.name, "arguments": self.arguments}
        return {"id": self.id, "type": "function", "function": function}


class ChatRequest(BaseModel):
    """A request in OpenAI chat form plus what the translator must remember to answer in kind."""

    model: str = ""
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] = Field(default_factory=list)
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None
    sampling: dict[str, Any] = Field(default_factory=dict)
    chat_template_kwargs: dict[str, Any] = Field(default_factory=dict)
    stream: bool = False
    include_usage: bool = False
    custom_tools: list[str] = Field(default_factory=list)
    """Responses API `custom` (free-text) tools sent upstream as functions taking `{input: str}`."""
    native_tools: dict[str, str] = Field(default_factory=dict)
    """Responses API client tools with their own call items (`local_shell`, `shell`, `apply_patch`)."""
    namespaced_tools: dict[str, tuple[str, str]] = Field(default_factory=dict)
    """Upstream function name `ns__name` -> (namespace, name) for Responses `namespace` tools."""

    def upstream_body(self, model: str) -> dict[str, Any]:
        """The non-streaming vLLM chat body, asking for token ids and sampled-token logprobs."""
        body: dict[str, Any] = {
            "model": model,
            "messages": self.messages,
            **self.sampling,
            "stream": False,
            "logprobs": True,
            "top_logprobs": 0,
            "return_token_ids": True,
        }
        if self.tools:
            body["tools"] = self.tools
            if self.tool_choice is not None:
                body["tool_choice"] = self.tool_choice
            if self.parallel_tool_calls is not None:
                body["parallel_tool_calls"] = self.parallel_tool_calls
        if self.chat_template_kwargs:
            body["chat_template_kwargs"] = self.chat_template_kwargs
        return body


class Usage(BaseModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens


class ChatCompletion(BaseModel):
    """One assistant turn as the backend produced it."""

    id: str
    model: str
    created: int = Field(default_factory=lambda: int(time.time()))
    content: str | None = None
    reasoning: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)
    finish_reason: FinishReason = "stop"
    stop_sequence: str | None = None
    """The stop string that ended generation, when one did."""
    usage: Usage = Field(default_factory=Usage)

    def assistant_message(self) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": self.content}
        if self.reasoning:
            message["reasoning"] = self.reasoning
        if self.tool_calls:
            message["tool_calls"] = [c.to_openai() for c in self.tool_calls]
        return message


def text_chunks(text: str, size: int = 48) -> list[str]:
    """Split text into stream deltas; an empty text gives no deltas."""
    return [text[i : i + size] for i in range(0, len(text), size)]
