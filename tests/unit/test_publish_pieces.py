"""The pure pieces of a weight publish: vLLM's abort counter read from /metrics, which turns spanned a
publish, the loss mask without them, and vLLM 0.32's over-window clamp in the emulation."""

from __future__ import annotations

import pytest

from farm.adapters.version_mask import mask_version_changes, turn_runs
from farm.agent.versions import TurnVersions, spanned_publish
from farm.inference.publish import aborted_count
from farm.llm.emulation import ContextWindowExceeded, resolve_max_tokens
from farm.models.results import Trace

METRICS = """# HELP vllm:request_success_total Count of successfully processed requests.
# TYPE vllm:request_success_total counter
vllm:request_success_total{engine="0",finished_reason="stop",model_name="m"} 7.0
vllm:request_success_total{engine="0",finished_reason="abort",model_name="m"} 2.0
vllm:request_success_total{engine="1",finished_reason="abort",model_name="m"} 1.0
vllm:request_success_created{engine="0",finished_reason="abort",model_name="m"} 1.795e+09
"""


def test_aborts_are_summed_over_engines_and_nothing_else() -> None:
    assert aborted_count(METRICS) == 3
    assert aborted_count("") == 0


@pytest.mark.parametrize(
    ("sent", "ended", "change"),
    [
        ((0, None), (0, None), None),  # no publish touched the call
        ((0, None), (1, None), (0, 1)),  # labelled while the call ran
        ((0, 1), (1, None), (0, 1)),  # sent during the publish, ended after it
        ((0, None), (0, 1), (0, 1)),  # a publish began while the call ran
        ((0, 1), (0, 1), (0, 1)),  # sent and ended within the publish (frozen across the pause)
        ((0, None), None, None),  # the backend left the pool
    ],
)
def test_a_call_spans_a_publish_when_its_registration_moved(
    sent: tuple[int | None, int | None], ended: tuple[int | None, int | None] | None, change: object
) -> None:
    assert spanned_publish(sent, ended) == change


def test_changes_are_recorded_per_turn_and_masked() -> None:
    versions = TurnVersions()
    versions.record(None, 0)
    versions.record(None, 0, (0, 1))
    versions.record(None, 1)
    meta = versions.metadata()
    assert meta["turn_policy_versions"] == [0, 0, 1]
    assert meta["turn_version_changes"] == [{"turn": 1, "from": 0, "to": 1, "token": None}]
    assert "turn_version_changes" not in TurnVersions().metadata()

    mask = [1, 1, 0, 1, 1, 1, 0, 0, 1]
    trace = Trace(prompt_ids=[5], response_ids=list(range(9)), loss_mask=mask, response_logprobs=[0.0] * 9,
                  metadata=meta)  # fmt: skip
    assert turn_runs(mask) == [(0, 2), (3, 6), (8, 9)]
    assert mask_version_changes(trace) == [1, 1, 0, 0, 0, 0, 0, 0, 1]
    trace.metadata["turn_version_changes"] = [{"turn": 1, "from": 0, "to": 1, "token": 2}]
    assert mask_version_changes(trace) == [1, 1, 0, 1, 1, 0, 0, 0, 1]


def test_vllm_032_clamps_max_tokens_to_the_window() -> None:
    assert resolve_max_tokens("vllm", 64, 60, 16, clamp=True) == 4
    assert resolve_max_tokens("vllm", 64, 10, None, clamp=True) == 54
    with pytest.raises(ContextWindowExceeded, match="maximum context length is 64"):
        resolve_max_tokens("vllm", 64, 64, 1, clamp=True)
    with pytest.raises(ContextWindowExceeded, match="too large"):
        resolve_max_tokens("vllm", 64, 60, 16)  # the default refuses, as older releases did
