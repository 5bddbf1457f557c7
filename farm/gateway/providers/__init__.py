"""Provider translators and provider detection (path first, then headers, then body shape)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from farm.gateway.providers import anthropic_messages, google_genai, openai_chat, openai_responses
from farm.gateway.providers.base import Provider, RequestError

OPENAI_CHAT = "openai_chat"
OPENAI_RESPONSES = "openai_responses"
ANTHROPIC = "anthropic"
GOOGLE = "google"

PROVIDERS: dict[str, Provider] = {
    name: Provider(name, m.parse_request, m.render_response, m.render_error, m.StreamEncoder)
    for name, m in (
        (OPENAI_CHAT, openai_chat),
        (OPENAI_RESPONSES, openai_responses),
        (ANTHROPIC, anthropic_messages),
        (GOOGLE, google_genai),
    )
}


def detect_provider(path: str, headers: Mapping[str, str] | None = None, body: Any = None) -> str:
    """Which provider API a request speaks. Unknown shapes default to OpenAI chat."""
    path = path.rstrip("/")
    if path.endswith("/chat/completions"):
        return OPENAI_CHAT
    if path.endswith("/responses"):
        return OPENAI_RESPONSES
    if path.endswith("/messages") or path.endswith("/messages/count_tokens"):
        return ANTHROPIC
    if ":generateContent" in path or ":streamGenerateContent" in path or ":countTokens" in path:
        return GOOGLE
    lowered = {k.lower() for k in (headers or {})}
    if "anthropic-version" in lowered or "anthropic-beta" in lowered:
        return ANTHROPIC
    if "x-goog-api-key" in lowered or "x-goog-api-client" in lowered:
        return GOOGLE
    if isinstance(body, dict):
        if "contents" in body:
            return GOOGLE
        if "input" in body and "messages" not in body:
            return OPENAI_RESPONSES
        if "messages" in body and (
            "system" in body or "stop_sequences" in body or "anthropic_version" in body
        ):
            return ANTHROPIC
    if "x-api-key" in lowered:
        return ANTHROPIC
    return OPENAI_CHAT


__all__ = [
    "ANTHROPIC",
    "GOOGLE",
    "OPENAI_CHAT",
    "OPENAI_RESPONSES",
    "PROVIDERS",
    "Provider",
    "RequestError",
    "detect_provider",
]
