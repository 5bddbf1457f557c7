"""A backend's OpenAI chat reply (vLLM's or SGLang's) -> a normalised completion plus token capture.

Where each server puts the token ids of a chat call:
- vLLM (vllm/entrypoints/openai/chat_completion/protocol.py, `return_token_ids`, >= 0.10.2): top-level
  `prompt_token_ids`, `choices[].token_ids`; logprob tokens `token_id:N` with return_tokens_as_token_ids.
- SGLang (sgl-project/sglang, python/sglang/srt/entrypoints/openai/protocol.py @
  004c82e07d876f6e4a0ad6e15325706b0f478f1a, ChatCompletionResponseChoice, filled by serving_chat.py
  `_build_chat_response`): per choice `prompt_token_ids` (`return_prompt_token_ids` or
  `return_token_ids`), `token_ids` (`return_token_ids`), `meta_info` (`return_meta_info`, whose
  `output_token_logprobs` are `[logprob, id, text]`); newer builds also answer response-level
  `sglext.input_ids` / `sglext.output_ids[choice]` (`return_input_ids_in_sglext` /
  `return_output_ids_in_sglext`, the only ids SGLang streams). Logprob tokens are text there.
SGLang refuses `return_token_ids`, `return_prompt_token_ids` and `return_meta_info` with `stream=true`
(400), and ignores request keys it does not declare, so each kind gets its own capture keys.
"""

from __future__ import annotations

import math
import re
import uuid
from dataclasses import dataclass
from typing import Any, get_args

from pydantic import BaseModel

from farm.gateway.errors import ErrorKind, GatewayError
from farm.gateway.normalized import ChatCompletion, FinishReason, ToolCall, Usage
from farm.inference.policy import Verdict, finish_verdict, status_verdict

_LIMIT = re.compile(
    r"maximum (?:context|model) length (?:is )?(?:of )?(\d+)|context length \((\d+) tokens\)", re.IGNORECASE
)
# vLLM: "your request has N input tokens"; SGLang: "N tokens from the input messages", "The input (N tokens)".
_REQUESTED = re.compile(
    r"(?:requested|has|contains|resulted in) (\d+)(?: input)? tokens|(\d+) tokens from the input"
    r"|the input \((\d+) tokens\)",
    re.IGNORECASE,
)


class UpstreamReply(BaseModel):
    completion: ChatCompletion
    prompt_ids: list[int]
    response_ids: list[int]
    response_logprobs: list[float] | None
    served_model: str
    capture_problem: str | None = None
    """Why token capture is incomplete (the backend did not return ids, or logprobs did not line up)."""
    weight_version: str | None = None
    """The weights that served the call, when the backend says: SGLang's chat reply carries them in its
    top-level `metadata.weight_version` (sgl-project/sglang test/srt/test_weight_version.py @ 7b50ab6),
    its native meta_info in `choices[].meta_info.weight_version`. vLLM's reply does not say."""


@dataclass
class ForwardResult:
    """A model call served: the reply, the backend that gave it, the time spent upstream, the attempts."""

    reply: UpstreamReply
    backend: str
    upstream_s: float
    attempts: int
    registered_version: int | None = None
    """The pool's policy_version for that backend when the call was sent."""


def capture_keys(kind: str, stream: bool) -> tuple[dict[str, Any], tuple[str, ...]]:
    """(keys to add, keys to drop) so that `kind`'s chat route answers token ids and logprobs."""
    if kind != "sglang":
        return {}, ()
    if stream:
        keys = {"return_input_ids_in_sglext": True, "return_output_ids_in_sglext": True}
        return keys, ("return_token_ids", "return_prompt_token_ids", "return_meta_info")
    keys = {"return_token_ids": True, "return_prompt_token_ids": True, "return_meta_info": True}
    return keys, ()


def openai_base(address: str, kind: str) -> str:
    """vLLM is registered at .../v1; SGLang may be registered at its root (its /generate lives there)."""
    address = address.rstrip("/")
    if kind == "sglang" and not address.endswith("/v1"):
        address += "/v1"
    return address


def chat_url(address: str, kind: str) -> str:
    return f"{openai_base(address, kind)}/chat/completions"


def models_url(address: str, kind: str) -> str:
    return f"{openai_base(address, kind)}/models"


def finish_reason(data: Any) -> str | None:
    """The first choice's finish reason of a chat reply of any shape (None when it has none)."""
    try:
        reason = data["choices"][0].get("finish_reason")
    except (KeyError, IndexError, TypeError, AttributeError):
        return None
    return reason if isinstance(reason, str) else None


def _token_ids(data: dict[str, Any], choice: dict[str, Any], index: int) -> tuple[list[int], list[int]]:
    """(prompt ids, response ids) from wherever this server put them (see the module docstring)."""
    sglext = data.get("sglext") or {}
    prompt = data.get("prompt_token_ids") or choice.get("prompt_token_ids") or sglext.get("input_ids") or []
    response = choice.get("token_ids")
    if response is None and sglext.get("output_ids"):
        response = sglext["output_ids"][index]
    if response is None:
        entries = (choice.get("meta_info") or {}).get("output_token_logprobs")
        response = [entry[1] for entry in entries] if entries else []
    return [_int(t) for t in prompt], [_int(t) for t in response]


def _int(value: Any) -> int:
    if isinstance(value, bool):
        raise TypeError(f"token id {value!r} is not an integer")
    return int(value)


def _logprobs(choice: dict[str, Any], response_ids: list[int]) -> tuple[list[float] | None, str | None]:
    meta_entries = (choice.get("meta_info") or {}).get("output_token_logprobs")
    if meta_entries and not (choice.get("logprobs") or {}).get("content"):
        if [_int(e[1]) for e in meta_entries] != response_ids:
            return None, "meta_info logprob ids do not match the sampled ids"
        return _finite([e[0] for e in meta_entries])
    entries = (choice.get("logprobs") or {}).get("content") or []
    if not entries:
        return None, "backend returned no logprobs"
    if len(entries) != len(response_ids):
        return None, f"{len(entries)} logprobs for {len(response_ids)} sampled tokens"
    for entry, token_id in zip(entries, response_ids, strict=True):
        token = entry.get("token") or ""
        if token.startswith("token_id:") and token[9:].isdigit() and int(token[9:]) != token_id:
            return None, "logprob tokens do not match the sampled ids"
    return _finite([e["logprob"] for e in entries])


def _finite(raw: list[Any]) -> tuple[list[float] | None, str | None]:
    values = [float(v) for v in raw]
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
    finish = choice.get("finish_reason") or "stop"
    if finish_verdict(finish) is Verdict.failover:
        # The engine dropped the request (SGLang/vLLM abort): the output is a fragment, not an answer. The
        # forwarder fails over before it gets here; a stream that already handed text on ends here.
        raise GatewayError(ErrorKind.upstream, f"backend ended the call with finish_reason {finish!r}")
    prompt_ids, response_ids = _token_ids(data, choice, int(choice.get("index") or 0))
    logprobs, problem = _logprobs(choice, response_ids)
    if not prompt_ids or not response_ids:
        problem = (
            "backend returned no token ids (needs vLLM >= 0.10.2 with return_token_ids, or SGLang with "
            "return_token_ids / return_prompt_token_ids + return_meta_info)"
        )
    calls = [
        ToolCall(
            id=c.get("id") or f"call_{uuid.uuid4().hex[:24]}",
            name=(c.get("function") or {}).get("name", ""),
            arguments=(c.get("function") or {}).get("arguments") or "",
        )
        for c in message.get("tool_calls") or []
    ]
    if calls:
        finish = "tool_calls"
    elif finish not in get_args(FinishReason):
        finish = "stop"
    stop_reason = choice.get("stop_reason", choice.get("matched_stop"))
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
        weight_version=_weight_version(data, choice),
    )


def _weight_version(data: dict[str, Any], choice: dict[str, Any]) -> str | None:
    for meta in (data.get("metadata"), choice.get("meta_info")):
        version = meta.get("weight_version") if isinstance(meta, dict) else None
        if isinstance(version, str | int) and not isinstance(version, bool):
            return str(version)
    return None


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


def _first_number(match: re.Match[str] | None) -> int | None:
    return next((int(g) for g in match.groups() if g), None) if match else None


def client_error(status: int, message: str) -> GatewayError:
    """A 4xx from the backend: context overflow gets its own kind (and token counts when stated)."""
    if status_verdict(status, message) is Verdict.overflow:
        limit = _LIMIT.search(message)
        requested = _REQUESTED.search(message)
        return GatewayError(
            ErrorKind.context_overflow,
            message,
            prompt_tokens=_first_number(requested),
            max_tokens=_first_number(limit),
        )
    return GatewayError(ErrorKind.invalid_request, f"backend refused the request ({status}): {message}")
