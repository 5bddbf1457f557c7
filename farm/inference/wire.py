"""Request bodies and answer parsing for each backend kind; no I/O, shared by the sync and async clients.

vLLM: POST {address}/completions with the prompt as token ids (address ends in /v1).
SGLang: POST {root}/generate with input_ids (root is the address without a trailing /v1).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping
from typing import Any, Literal

from pydantic import ValidationError

from farm.inference import sampling_keys
from farm.inference.errors import (
    BackendRejected,
    BackendUnavailable,
    BadBackendResponse,
    ContextOverflow,
    InferenceError,
)
from farm.inference.generation import Generation
from farm.inference.policy import Verdict, finish_verdict, status_verdict

BackendKind = Literal["vllm", "sglang"]

_TOKEN_ID = re.compile(r"^token_id:(-?\d+)$")


def request(kind: BackendKind, address: str, prompt_ids: list[int], sampling: Mapping[str, Any],
            model: str | None = None) -> tuple[str, dict[str, Any]]:  # fmt: skip
    """The URL and JSON body of one generation call; BackendRejected (never sent) when the caller's
    sampling parameters hold a key this kind of server does not accept (sampling_keys.py)."""
    try:
        params = sampling_keys.for_backend(kind, sampling)
    except sampling_keys.UnsupportedSamplingKey as exc:
        raise BackendRejected(f"{address}: {exc}", backend=address, status=400) from None
    if kind == "vllm":
        body: dict[str, Any] = {
            **params,
            "prompt": list(prompt_ids),
            "logprobs": 0,
            "return_token_ids": True,
            "return_tokens_as_token_ids": True,
            "skip_special_tokens": False,
            "add_special_tokens": False,
        }
        if model:
            body["model"] = model
        return f"{address.rstrip('/')}/completions", body
    if kind == "sglang":
        params.setdefault("skip_special_tokens", False)
        body = {
            "input_ids": list(prompt_ids),
            "sampling_params": params,
            "return_logprob": True,
            "logprob_start_len": -1,
            "top_logprobs_num": 0,
            "stream": False,
        }
        return f"{sglang_root(address)}/generate", body
    raise ValueError(f"unknown backend kind {kind!r}")


def sglang_root(address: str) -> str:
    return address.rstrip("/").removesuffix("/v1")


def error_for_status(status: int, text: str, backend: str) -> InferenceError:
    """Classify a non-200 answer by the shared policy (farm/inference/policy.py)."""
    message = _error_message(text)
    verdict = status_verdict(status, message)
    if verdict is Verdict.failover:
        return BackendUnavailable(f"{backend} answered {status}: {message}", backend=backend, status=status)
    if verdict is Verdict.overflow:
        return ContextOverflow(message, backend=backend, status=status)
    return BackendRejected(f"{backend} answered {status}: {message}", backend=backend, status=status)


def parse(kind: BackendKind, payload: Any, backend: str, prompt_len: int, latency_s: float) -> Generation:
    try:
        if kind == "vllm":
            return _parse_vllm(payload, backend, prompt_len, latency_s)
        return _parse_sglang(payload, backend, prompt_len, latency_s)
    except InferenceError:
        raise
    except (
        KeyError,
        IndexError,
        TypeError,
        ValueError,
        AttributeError,
        ArithmeticError,
        ValidationError,
    ) as exc:
        # Whatever shape the answer has ({"choices": "lol"}, ids as strings, a list for a dict), it is
        # the backend breaking the protocol: one classified error, never a crash of the caller.
        raise BadBackendResponse(f"malformed answer from {backend}: {exc!r}", backend=backend) from exc


def _parse_vllm(payload: Any, backend: str, prompt_len: int, latency_s: float) -> Generation:
    choice = payload["choices"][0]
    if choice.get("finish_reason") in ("abort", "error"):
        _finish(choice["finish_reason"], backend)  # retried elsewhere, whatever the partial output holds
    logprobs = choice.get("logprobs") or {}
    values = logprobs.get("token_logprobs")
    tokens = logprobs.get("tokens")
    ids = choice.get("token_ids")
    if ids is None and tokens is not None:
        # Older vLLM: no token_ids, but return_tokens_as_token_ids put them in the logprob tokens.
        ids = [_token_id(t, backend) for t in tokens]
    if ids is None:
        raise BadBackendResponse(f"{backend} returned no token ids (needs vLLM >= 0.10.2)", backend=backend)
    if values is None:
        raise BadBackendResponse(f"{backend} returned no logprobs", backend=backend)
    _check_aligned(ids, values, backend)
    if tokens is not None:
        if len(tokens) != len(ids):
            raise BadBackendResponse(
                f"{backend}: {len(tokens)} logprob tokens for {len(ids)} ids", backend=backend
            )
        for i, (token, token_id) in enumerate(zip(tokens, ids, strict=True)):
            match = _TOKEN_ID.match(token) if isinstance(token, str) else None
            if match and int(match.group(1)) != token_id:
                raise BadBackendResponse(
                    f"{backend}: logprob token {i} is {token!r} but token_ids[{i}] is {token_id}",
                    backend=backend,
                )
    usage = payload.get("usage") or {}
    return Generation(
        token_ids=ids,
        logprobs=values,
        finish_reason=_finish(choice.get("finish_reason"), backend),
        text=choice.get("text") or "",
        prompt_tokens=usage.get("prompt_tokens") or prompt_len,
        backend=backend,
        latency_s=latency_s,
        stop_reason="repetition"
        if choice.get("finish_reason") == "repetition"
        else choice.get("stop_reason"),
    )


def _parse_sglang(payload: Any, backend: str, prompt_len: int, latency_s: float) -> Generation:
    if isinstance(payload, list):
        payload = payload[0]
    meta = payload["meta_info"]
    finish = meta.get("finish_reason") or {}
    kind = finish.get("type") if isinstance(finish, dict) else finish
    if kind == "abort":
        # Checked before the logprobs: an abort before prefill carries no output at all.
        message = str(finish.get("message", "")) if isinstance(finish, dict) else ""
        _finish(kind, backend, message)
    entries = meta.get("output_token_logprobs")
    if entries is None:
        raise BadBackendResponse(f"{backend} returned no output_token_logprobs", backend=backend)
    ids = payload.get("output_ids")
    logged_ids = [int(e[1]) for e in entries]
    if ids is None:
        ids = logged_ids
    elif list(ids) != logged_ids:
        raise BadBackendResponse(
            f"{backend}: output_ids do not match output_token_logprobs ids", backend=backend
        )
    values = [e[0] for e in entries]
    _check_aligned(ids, values, backend)
    matched = finish.get("matched") if isinstance(finish, dict) else None
    version = meta.get("weight_version")
    if isinstance(version, bool) or not isinstance(version, str | int):
        version = None
    return Generation(
        token_ids=ids,
        logprobs=values,
        finish_reason=_finish(kind, backend),
        text=payload.get("text") or "",
        prompt_tokens=meta.get("prompt_tokens") or prompt_len,
        backend=backend,
        latency_s=latency_s,
        stop_reason=matched if isinstance(matched, str | int) else None,
        weight_version=None if version is None else str(version),
    )


def _check_aligned(ids: list[Any], values: list[Any], backend: str) -> None:
    if len(ids) != len(values):
        raise BadBackendResponse(
            f"{backend}: {len(ids)} token ids but {len(values)} logprobs", backend=backend
        )
    if any(not isinstance(v, int | float) or isinstance(v, bool) or not math.isfinite(v) for v in values):
        raise BadBackendResponse(f"{backend}: a sampled token has no finite numeric logprob", backend=backend)
    if any(not isinstance(i, int) or isinstance(i, bool) or i < 0 for i in ids):
        raise BadBackendResponse(
            f"{backend}: a sampled token id is not a non-negative integer", backend=backend
        )


def _token_id(token: Any, backend: str) -> int:
    match = _TOKEN_ID.match(token) if isinstance(token, str) else None
    if not match:
        raise BadBackendResponse(f"{backend}: logprob token {token!r} is not 'token_id:N'", backend=backend)
    return int(match.group(1))


_ENGINE_FINISHES = ("stop", "length", "repetition", "abort", "error")
"""What the engines' token routes end with (the chat routes' tool_calls never appear there)."""


def _finish(reason: Any, backend: str, message: str = "") -> Literal["stop", "length"]:
    """vLLM's finish reasons (vllm/v1/engine/__init__.py FINISH_REASON_STRINGS: stop, length, abort,
    error, repetition) and SGLang's meta_info.finish_reason types (stop, length, abort), judged by the
    shared policy: an aborted or errored request fails over, repetition ends generation normally (parse
    records it as the stop reason)."""
    verdict = finish_verdict(reason, message) if reason in _ENGINE_FINISHES else Verdict.bad_reply
    if verdict is Verdict.ok:
        return "length" if reason == "length" else "stop"
    if verdict is Verdict.overflow:
        raise ContextOverflow(message, backend=backend)
    if verdict is Verdict.failover:
        raise BackendUnavailable(
            f"{backend} ended the request with finish_reason {reason!r}", backend=backend
        )
    raise BadBackendResponse(f"{backend}: unknown finish_reason {reason!r}", backend=backend)


def _error_message(text: str) -> str:
    try:
        body = json.loads(text)
    except ValueError:
        return text.strip()[:500]
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and "message" in error:
            return str(error["message"])
        if isinstance(error, str):
            return error
        if "message" in body:
            return str(body["message"])
        if "detail" in body:
            return str(body["detail"])
    return text.strip()[:500]
