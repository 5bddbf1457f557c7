"""Each inference server as it really is: the sampling keys it accepts (and under which name), and the
finish reasons it answers. Key lists and finish reasons are read from the servers' sources, cited in
farm/inference/sampling_keys.py and farm/inference/wire.py; no sockets here."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from farm.inference import wire
from farm.inference.errors import BackendRejected, BackendUnavailable, BadBackendResponse, ContextOverflow
from farm.inference.sampling_keys import (
    SET_BY_FARM,
    SGLANG_KEYS,
    VLLM_KEYS,
    UnsupportedSamplingKey,
    check_known,
    for_backend,
)
from farm.models.requests import ProcessRequest
from tests.model_side.test_wire import _sglang_payload, _vllm_payload


def test_sglang_gets_its_own_names_and_nothing_it_would_refuse() -> None:
    _, body = wire.request(
        "sglang", "http://h:1/v1", [1], {"max_tokens": 5, "min_tokens": 1, "seed": 2, "top_k": 4}
    )
    assert set(body["sampling_params"]) <= SGLANG_KEYS
    renamed = {"max_new_tokens": 5, "min_new_tokens": 1, "sampling_seed": 2, "top_k": 4}
    assert body["sampling_params"] == {**renamed, "skip_special_tokens": False}


@pytest.mark.parametrize(
    ("kind", "key"), [("sglang", "bad_words"), ("sglang", "length_penalty"), ("vllm", "regex")]
)
def test_a_key_the_backend_does_not_accept_is_refused_before_sending(kind: str, key: str) -> None:
    with pytest.raises(BackendRejected, match=f"sampling_params.{key}: not accepted by"):
        wire.request(kind, "http://h:1/v1", [1], {key: 1})  # type: ignore[arg-type]


@given(st.sampled_from(sorted(VLLM_KEYS | SGLANG_KEYS)))
def test_every_key_some_server_accepts_passes_submission(key: str) -> None:
    check_known([key])


@pytest.mark.parametrize("key", ["top_kk", "temprature", "max_new_token"])
def test_a_key_no_server_knows_is_a_422_naming_it(key: str) -> None:
    with pytest.raises(ValueError, match=f"sampling_params.{key}: not a sampling parameter"):
        ProcessRequest.model_validate({"instance": {"handler": "noop"}, "sampling_params": {key: 1}})


@pytest.mark.parametrize("key", sorted(SET_BY_FARM & (VLLM_KEYS | {"logprobs", "n", "prompt"})))
def test_keys_the_farm_sets_cannot_be_overridden(key: str) -> None:
    with pytest.raises(UnsupportedSamplingKey, match="set by the farm"):
        for_backend("vllm", {key: 1})


def test_vllm_repetition_is_a_normal_end_recorded_as_such() -> None:
    generation = wire.parse("vllm", _vllm_payload([(5, -0.1)], finish="repetition"), "b", 1, 0.0)
    assert generation.finish_reason == "stop" and generation.stop_reason == "repetition"


@pytest.mark.parametrize("finish", ["abort", "error"])
def test_vllm_abort_and_error_are_retried_elsewhere(finish: str) -> None:
    with pytest.raises(BackendUnavailable, match=f"finish_reason '{finish}'"):
        wire.parse("vllm", _vllm_payload([(5, -0.1)], finish=finish), "b", 1, 0.0)


def test_sglang_abort_is_retried_unless_it_says_the_window_is_full() -> None:
    aborted = _sglang_payload([(5, -0.1)])
    aborted["meta_info"]["finish_reason"] = {"type": "abort", "message": "server shutting down"}
    with pytest.raises(BackendUnavailable):
        wire.parse("sglang", aborted, "b", 1, 0.0)
    aborted["meta_info"]["finish_reason"]["message"] = "Input length exceeds the maximum allowed length"
    with pytest.raises(ContextOverflow):
        wire.parse("sglang", aborted, "b", 1, 0.0)


def test_an_unknown_finish_reason_is_a_bad_reply() -> None:
    with pytest.raises(BadBackendResponse, match="unknown finish_reason"):
        wire.parse("vllm", _vllm_payload([(5, -0.1)], finish="lol"), "b", 1, 0.0)
