"""What a provider translator offers: request in, response / stream / error out."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from farm.gateway.errors import GatewayError
from farm.gateway.normalized import ChatCompletion, ChatRequest, ToolCall, text_chunks


class RequestError(ValueError):
    """The client's body cannot be translated (answered as the provider's invalid-request error)."""


class StreamEncoder(Protocol):
    """Provider SSE frames for one streamed turn, fed as the backend produces it.

    `start` once, then `text` (kind "reasoning" or "content") and `tool_call` (each call whole) in order,
    then `finish` with the assembled completion; or `error` if the backend fails after the stream began.
    """

    def start(self) -> list[str]: ...
    def text(self, kind: str, text: str) -> list[str]: ...
    def tool_call(self, call: ToolCall) -> list[str]: ...
    def finish(self, completion: ChatCompletion) -> list[str]: ...
    def error(self, error: GatewayError) -> list[str]: ...


def synthesize(encoder: StreamEncoder, completion: ChatCompletion) -> list[str]:
    """The whole stream of one finished completion (reasoning, then content, then calls)."""
    frames = encoder.start()
    for piece in text_chunks(completion.reasoning or ""):
        frames += encoder.text("reasoning", piece)
    for piece in text_chunks(completion.content or ""):
        frames += encoder.text("content", piece)
    for call in completion.tool_calls:
        frames += encoder.tool_call(call)
    return frames + encoder.finish(completion)


@dataclass(frozen=True)
class Provider:
    name: str
    parse_request: Callable[[dict[str, Any], str | None], ChatRequest]
    """(body, model from the path or None) -> normalised request."""
    render_response: Callable[[ChatCompletion, ChatRequest], dict[str, Any]]
    render_error: Callable[[GatewayError], dict[str, Any]]
    stream_encoder: Callable[[ChatCompletion, ChatRequest], StreamEncoder]
    """(head: the completion's id, model, created and prompt usage so far, request) -> encoder."""

    def render_stream(self, completion: ChatCompletion, request: ChatRequest) -> list[str]:
        """The full SSE byte stream, as text frames, synthesised from one finished completion."""
        return synthesize(self.stream_encoder(completion, request), completion)
