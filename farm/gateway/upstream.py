"""The inference backend's OpenAI chat reply (vLLM dialect) -> a normalised completion plus token capture."""

from __future__ import annotations

import math
import re
import uuid
from typing import Any, get_args

from pydantic import BaseModel

from farm.gateway.errors import ErrorKind, GatewayError, is_context_overflow
from farm.gateway.normalized import ChatCompletion, FinishReason, ToolCall, Usage

_LIMIT = re.compile(r"maximum (?:context|model) length (?:is )?(?:of )?(\d+)", re.IGNORECASE)
_REQUESTED = re.compile(r"(?:requested|has|contains|resulted in) (\d+)(?: input)? tokens", re.IGNORECASE)


class UpstreamReply(BaseModel):
    completion: ChatCompletion
    prompt_ids: list[int]
    response_ids: list[int]
    response_logprobs: list[float] | None
    served_model: str
    capture_problem: str | None = None
    """Why token capture is incomplete (the backend did not return ids, or logprobs did not line up)."""


def _logprobs(choice: dict[str, Any], response_ids: list[int]) -> tuple[list[float] | None, str | None]:
    entries = (choice.get("logprobs") or {}).get("content") or []
    if not entries:
        return None, "backend returned no logprobs"
    if len(entries) != len(response_ids):
        return None, f"{len(entries)} logprobs for {len(response_ids)} sampled tokens"
    for entry, token_id in zip(entries, response_ids, strict=True):
        token = entry.get("token") or ""
        if token.startswith("token_id:") and token[9:].isdigit() and int(token[9:]) != token_id:
            return None, "logprob tokens do not match the sampled ids"
    values = [float(e["logprob"]) for e in entries]
    if not all(math.isfinite(v) for v in values):
        return None, "backend returned a non-finite logprob"
    return values, None


def parse_chat_reply(data: dict[str, Any], completion_id: str) -> UpstreamReply:
    """Read ids, logprobs, the parsed message and finish reason from a non-streaming chat reply. A reply
    of any other shape ({"choices": "lol"}, ids that are not integers) is an upstream error, not a 500."""
    try:
        return _parse_chat_reply(data, completion_id)
    except (AttributeError, TypeError, ValueError, KeyError, IndexError, ArithmeticError) as exc:
        detail = f"{type(exc).__name__}: {exc}"[:300]
        raise GatewayError(ErrorKind.upstream, f"backend reply breaks the protocol ({detail})") from None


def _parse_chat_reply(data: dict[str, Any], completion_id: str) -> UpstreamReply:
    try:
        choice = data["choices"][0]
    except (KeyError, IndexError, TypeError):
        raise GatewayError(ErrorKind.upstream, "backend reply has no choices") from None
    message = choice.get("message") or {}
    prompt_ids = [int(t) for t in data.get("prompt_token_ids") or choice.get("prompt_token_ids") or []]
    response_ids = [int(t) for t in choice.get("token_ids") or []]
    logprobs, problem = _logprobs(choice, response_ids)
    if not prompt_ids or not response_ids:
        problem = "backend returned no token ids (needs vLLM >= 0.10.2 with return_token_ids)"
    calls = [
        ToolCall(
            id=c.get("id") or f"call_{uuid.uuid4().hex[:24]}",
            name=(c.get("function") or {}).get("name", ""),
            arguments=(c.get("function") or {}).get("arguments") or "",
        )
        for c in message.get("tool_calls") or []
    ]
    finish = choice.get("finish_reason") or "stop"
    if calls:
        finish = "tool_calls"
    elif finish not in get_args(FinishReason):
        finish = "stop"
    stop_reason = choice.get("stop_reason")
    usage = data.get("usage") or {}
    completion = ChatCompletion(
        id=completion_id,
        model=str(data.get("model") or ""),
        content=message.get("content"),
        reasoning=message.get("reasoning") or message.get("reasoning_content"),
        tool_calls=calls,
        finish_reason=finish,
        stop_sequence=stop_reason if isinstance(stop_reason, str) and finish == "stop" else None,
        usage=Usage(
            prompt_tokens=int(usage.get("prompt_tokens") or len(prompt_ids)),
            completion_tokens=int(usage.get("completion_tokens") or len(response_ids)),
            cached_tokens=int((usage.get("prompt_tokens_details") or {}).get("cached_tokens") or 0),
        ),
    )
    return UpstreamReply(
        completion=completion,
        prompt_ids=prompt_ids,
        response_ids=response_ids,
        response_logprobs=logprobs,
        served_model=completion.model,
        capture_problem=problem,
    )


def error_message(data: Any, fallback: str) -> str:
    if isinstance(data, dict):
        error = data.get("error")
        if isinstance(error, dict) and error.get("message"):
            return str(error["message"])
        if isinstance(error, str):
            return error
        if data.get("message"):
            return str(data["message"])
        if data.get("detail"):
            return str(data["detail"])
    return fallback


def client_error(status: int, message: str) -> GatewayError:
    """A 4xx from the backend: context overflow gets its own kind (and token counts when stated)."""
    if is_context_overflow(message):
        limit = _LIMIT.search(message)
        requested = _REQUESTED.search(message)
        return GatewayError(
            ErrorKind.context_overflow,
            message,
            prompt_tokens=int(requested.group(1)) if requested else None,
            max_tokens=int(limit.group(1)) if limit else None,
        )
    return GatewayError(ErrorKind.invalid_request, f"backend refused the request ({status}): {message}")
