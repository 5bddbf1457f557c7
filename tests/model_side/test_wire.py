"""Request bodies and answer parsing of the inference client (pure logic, no sockets)."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from farm.inference import wire
from farm.inference.errors import BackendRejected, BackendUnavailable, BadBackendResponse, ContextOverflow

ids_and_logprobs = st.lists(
    st.tuples(st.integers(0, 150_000), st.floats(-50, 0, allow_nan=False)), min_size=1, max_size=30
)


def _vllm_payload(pairs: list[tuple[int, float]], finish: str = "stop") -> dict:
    return {
        "choices": [
            {
                "text": "x",
                "finish_reason": finish,
                "stop_reason": None,
                "token_ids": [t for t, _ in pairs],
                "logprobs": {
                    "tokens": [f"token_id:{t}" for t, _ in pairs],
                    "token_logprobs": [v for _, v in pairs],
                },
            }
        ],
        "usage": {"prompt_tokens": 7, "completion_tokens": len(pairs)},
    }


def _sglang_payload(pairs: list[tuple[int, float]]) -> dict:
    return {
        "text": "x",
        "output_ids": [t for t, _ in pairs],
        "meta_info": {
            "finish_reason": {"type": "length", "length": len(pairs)},
            "prompt_tokens": 7,
            "output_token_logprobs": [[v, t, None] for t, v in pairs],
        },
    }


def test_vllm_request_body() -> None:
    url, body = wire.request(
        "vllm", "http://h:1/v1/", [1, 2], {"max_tokens": 5, "seed": None, "top_k": 3}, "m"
    )
    assert url == "http://h:1/v1/completions"
    assert body["prompt"] == [1, 2] and body["max_tokens"] == 5 and body["top_k"] == 3 and "seed" not in body
    assert body["logprobs"] == 0 and body["return_token_ids"] and body["return_tokens_as_token_ids"]
    assert (
        body["skip_special_tokens"] is False and body["add_special_tokens"] is False and body["model"] == "m"
    )


def test_sglang_request_body() -> None:
    url, body = wire.request("sglang", "http://h:1/v1", [1], {"max_tokens": 5, "seed": 3, "temperature": 0.7})
    assert url == "http://h:1/generate"
    assert body["input_ids"] == [1] and body["return_logprob"] is True
    assert body["sampling_params"] == {
        "max_new_tokens": 5,
        "sampling_seed": 3,
        "temperature": 0.7,
        "skip_special_tokens": False,
    }


@settings(max_examples=50, deadline=None)
@given(pairs=ids_and_logprobs)
def test_well_formed_answers_parse_exactly(pairs: list[tuple[int, float]]) -> None:
    for kind, payload in (("vllm", _vllm_payload(pairs)), ("sglang", _sglang_payload(pairs))):
        generation = wire.parse(kind, payload, "b", prompt_len=7, latency_s=0.1)  # type: ignore[arg-type]
        assert generation.token_ids == [t for t, _ in pairs]
        assert generation.logprobs == [v for _, v in pairs]
        assert generation.prompt_tokens == 7 and generation.backend == "b"


@settings(max_examples=50, deadline=None)
@given(pairs=ids_and_logprobs, cut=st.integers(0, 29))
def test_misaligned_logprobs_are_rejected(pairs: list[tuple[int, float]], cut: int) -> None:
    payload = _vllm_payload(pairs)
    values = payload["choices"][0]["logprobs"]["token_logprobs"]
    del values[cut % len(values)]
    with pytest.raises(BadBackendResponse):
        wire.parse("vllm", payload, "b", 7, 0.0)
    payload = _sglang_payload(pairs)
    payload["output_ids"] = [*payload["output_ids"], 5]
    with pytest.raises(BadBackendResponse):
        wire.parse("sglang", payload, "b", 7, 0.0)


def test_token_id_strings_must_match_ids() -> None:
    payload = _vllm_payload([(1, -0.1), (2, -0.2)])
    payload["choices"][0]["logprobs"]["tokens"][1] = "token_id:3"
    with pytest.raises(BadBackendResponse, match="token_ids\\[1\\] is 2"):
        wire.parse("vllm", payload, "b", 7, 0.0)


def test_old_vllm_without_token_ids_uses_logprob_tokens() -> None:
    payload = _vllm_payload([(9, -0.5)])
    del payload["choices"][0]["token_ids"]
    assert wire.parse("vllm", payload, "b", 7, 0.0).token_ids == [9]
    payload["choices"][0]["logprobs"]["tokens"] = ["hello"]
    with pytest.raises(BadBackendResponse):
        wire.parse("vllm", payload, "b", 7, 0.0)


def test_malformed_answers_are_bad_responses() -> None:
    for payload in (
        {},
        {"choices": []},
        {"choices": [{"token_ids": [1]}]},
        _vllm_payload([(1, 0.0)], "weird"),
    ):
        with pytest.raises(BadBackendResponse):
            wire.parse("vllm", payload, "b", 7, 0.0)
    payload = _vllm_payload([(1, 0.0)])
    payload["choices"][0]["logprobs"]["token_logprobs"] = [None]
    with pytest.raises(BadBackendResponse):
        wire.parse("vllm", payload, "b", 7, 0.0)


def test_status_classification() -> None:
    overflow = json.dumps(
        {
            "error": {
                "message": "This model's maximum context length is 4096 tokens. However, ...",
                "code": 400,
            }
        }
    )
    assert isinstance(wire.error_for_status(400, overflow, "b"), ContextOverflow)
    sglang = json.dumps(
        {"error": {"message": "Requested token count exceeds the model's maximum context length"}}
    )
    assert isinstance(wire.error_for_status(400, sglang, "b"), ContextOverflow)
    assert isinstance(wire.error_for_status(400, '{"error": {"message": "bad top_p"}}', "b"), BackendRejected)
    assert isinstance(wire.error_for_status(404, "not found", "b"), BackendRejected)
    for status in (500, 502, 503, 429):
        error = wire.error_for_status(status, "busy", "b")
        assert isinstance(error, BackendUnavailable) and error.status == status


def test_sglang_abort_for_length_is_overflow() -> None:
    payload = _sglang_payload([])
    payload["meta_info"]["finish_reason"] = {
        "type": "abort",
        "message": "Input length (9000 tokens) exceeds the maximum allowed length (8192 tokens).",
    }
    with pytest.raises(ContextOverflow):
        wire.parse("sglang", payload, "b", 7, 0.0)
