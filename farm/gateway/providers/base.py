"""What a provider translator offers: request in, response / stream / error out."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from farm.gateway.errors import GatewayError
from farm.gateway.normalized import ChatCompletion, ChatRequest


class RequestError(ValueError):
    """The client's body cannot be translated (answered as the provider's invalid-request error)."""


@dataclass(frozen=True)
class Provider:
    name: str
    parse_request: Callable[[dict[str, Any], str | None], ChatRequest]
    """(body, model from the path or None) -> normalised request."""
    render_response: Callable[[ChatCompletion, ChatRequest], dict[str, Any]]
    render_stream: Callable[[ChatCompletion, ChatRequest], list[str]]
    """The full SSE byte stream, as text frames, synthesised from one finished completion."""
    render_error: Callable[[GatewayError], dict[str, Any]]
