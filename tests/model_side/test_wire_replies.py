"""The farm's token-in/token-out client against replies written from the real servers' code (not
captured from the farm's own reference server), one per finish the servers can report.

SGLang /generate: sgl-project/sglang python/sglang/srt/managers/tokenizer_manager.py (meta_info: id,
finish_reason, prompt_tokens, completion_tokens, cached_tokens, output_token_logprobs as
[logprob, id, text-or-null]) with finish reasons from python/sglang/srt/managers/schedule_batch.py @
fd3907ee4618e96b73ee94d9a836db78efb5d046 (FINISH_MATCHED_TOKEN / _STR / FINISH_LENGTH / FINISH_ABORT
`to_json`); its 400 bodies from entrypoints/http_server.py ({"error": {"message"}}) and the window
checks of tokenizer_manager.py `_validate_one_request`.
vLLM /v1/completions: vllm-project/vllm vllm/entrypoints/openai/completion/protocol.py @
d5dba2d7b0ab9b98096560c69db7126b54b14d79 (CompletionResponseChoice: text, logprobs {text_offset,
token_logprobs, tokens, top_logprobs}, finish_reason, stop_reason, token_ids, prompt_token_ids) with
finish reasons from vllm/v1/engine/__init__.py (stop, length, abort, error, repetition); its 400 body
is ErrorResponse {"error": {message, type, param, code}}.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from farm.inference import wire
from farm.inference.errors import BackendRejected, BackendUnavailable, ContextOverflow, InferenceError

IDS = [791, 4320, 374, 220, 4103, 151645]
LPS = [-0.11, -0.02, -0.3, -0.01, -0.7, -0.05]


def sglang_generate(finish: dict[str, Any], ids: list[int] = IDS, lps: list[float] = LPS) -> dict[str, Any]:
    return {
        "text": "The answer is 51",
        "output_ids": ids,
        "meta_info": {
            "id": "9a3c0e5d41f64b1f",
            "finish_reason": finish,
            "prompt_tokens": 31,
            "weight_version": "default",
            "completion_tokens": len(ids),
            "cached_tokens": 12,
            "e2e_latency": 0.21,
            "input_token_logprobs": [],
            "output_token_logprobs": [[lp, t, None] for t, lp in zip(ids, lps, strict=True)],
            "input_top_logprobs": [],
            "output_top_logprobs": [],
        },
    }


def vllm_completion(finish: str, stop_reason: Any = None, logprobs: bool = True) -> dict[str, Any]:
    choice = {
        "index": 0,
        "text": "The answer is 51",
        "logprobs": {
            "text_offset": [0, 3, 10, 13, 14, 16],
            "token_logprobs": LPS,
            "tokens": [f"token_id:{t}" for t in IDS],
            "top_logprobs": [{f"token_id:{t}": lp} for t, lp in zip(IDS, LPS, strict=True)],
        }
        if logprobs
        else None,
        "finish_reason": finish,
        "stop_reason": stop_reason,
        "token_ids": IDS,
        "prompt_logprobs": None,
        "prompt_token_ids": list(range(31)),
    }
    return {
        "id": "cmpl-3f1e",
        "object": "text_completion",
        "created": 1764000000,
        "model": "Qwen/Qwen3-8B",
        "choices": [choice],
        "usage": {
            "prompt_tokens": 31,
            "total_tokens": 37,
            "completion_tokens": 6,
            "prompt_tokens_details": None,
        },
    }


@pytest.mark.parametrize(
    ("finish", "reason", "stop"),
    [
        ({"type": "stop", "matched": 151645}, "stop", 151645),
        ({"type": "stop", "matched": "</answer>"}, "stop", "</answer>"),
        ({"type": "length", "length": 6}, "length", None),
    ],
)
def test_sglang_generate_finishes(finish: dict[str, Any], reason: str, stop: Any) -> None:
    generation = wire.parse("sglang", sglang_generate(finish), "b", 31, 0.2)
    assert (generation.token_ids, generation.logprobs) == (IDS, LPS)
    assert (generation.finish_reason, generation.stop_reason, generation.prompt_tokens) == (reason, stop, 31)


@pytest.mark.parametrize("ids", [IDS[:3], []], ids=["partial", "before-prefill"])
def test_sglang_abort_is_retried_elsewhere(ids: list[int]) -> None:
    finish = {"type": "abort", "message": "Aborted", "status_code": None, "err_type": None}
    payload = sglang_generate(finish, ids, LPS[: len(ids)])
    if not ids:
        del payload["meta_info"]["output_token_logprobs"]  # nothing was sampled, nothing logged
    with pytest.raises(BackendUnavailable, match="abort"):
        wire.parse("sglang", payload, "b", 31, 0.2)


def test_sglang_abort_for_the_window_is_an_overflow() -> None:
    message = "The input (40000 tokens) is longer than the model's context length (32768 tokens)."
    finish = {"type": "abort", "message": message, "status_code": 400, "err_type": "BadRequestError"}
    with pytest.raises(ContextOverflow):
        wire.parse("sglang", sglang_generate(finish, [], []), "b", 40000, 0.0)


@pytest.mark.parametrize(
    ("finish", "stop_reason", "expected_stop"),
    [
        ("stop", None, None),
        ("stop", "</answer>", "</answer>"),
        ("length", None, None),
        ("repetition", None, "repetition"),
    ],
)
def test_vllm_completion_finishes(finish: str, stop_reason: Any, expected_stop: Any) -> None:
    generation = wire.parse("vllm", vllm_completion(finish, stop_reason), "b", 31, 0.2)
    assert (generation.token_ids, generation.logprobs) == (IDS, LPS)
    assert generation.finish_reason == ("length" if finish == "length" else "stop")
    assert generation.stop_reason == expected_stop


@pytest.mark.parametrize("finish", ["abort", "error"])
@pytest.mark.parametrize("logprobs", [True, False])
def test_vllm_abort_and_error_are_retried_elsewhere(finish: str, logprobs: bool) -> None:
    with pytest.raises(BackendUnavailable, match=finish):
        wire.parse("vllm", vllm_completion(finish, logprobs=logprobs), "b", 31, 0.2)


SGLANG_OVER = (
    "Requested token count exceeds the model's maximum context length of 32768 tokens. You requested a total "
    "of 34000 tokens: 30000 tokens from the input messages and 4000 tokens for the completion. Please reduce "
    "the number of tokens in the input messages or the completion to fit within the limit."
)
SGLANG_INPUT = "The input (40000 tokens) is longer than the model's context length (32768 tokens)."
VLLM_OVER = (
    "'max_tokens' or 'max_completion_tokens' is too large: 16384. This model's maximum context length "
    "is 65536 tokens and your request has 52189 input tokens (16384 > 65536 - 52189). "
    "(parameter=max_tokens, value=16384)"
)


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        ({"error": {"message": SGLANG_OVER}}, ContextOverflow),
        ({"error": {"message": SGLANG_INPUT}}, ContextOverflow),
        ({"error": {"message": "Unexpected keyword argument 'bad_words'"}}, BackendRejected),
        (
            {"error": {"message": VLLM_OVER, "type": "BadRequestError", "param": "max_tokens", "code": 400}},
            ContextOverflow,
        ),
        (
            {
                "object": "error",
                "message": SGLANG_OVER,
                "type": "BadRequestError",
                "param": None,
                "code": 400,
            },
            ContextOverflow,
        ),
    ],
    ids=["sglang-total", "sglang-input", "sglang-unknown-key", "vllm-max-tokens", "sglang-openai"],
)
def test_400_bodies_are_classified(body: dict[str, Any], expected: type[InferenceError]) -> None:
    error = wire.error_for_status(400, json.dumps(body), "b")
    assert type(error) is expected and error.status == 400
