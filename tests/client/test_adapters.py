"""Trainer adapters: each format keeps every token, mask and logprob where the trainer expects it."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from farm.adapters import (
    IGNORE_INDEX,
    SlimeStatus,
    flatten,
    to_nemo_rl,
    to_sft_records,
    to_skyrl,
    to_slime_samples,
    to_verl,
    write_jsonl,
)
from farm.client.groups import Group
from farm.models import JobResult, JobState, StageError, Trace, Trajectory


@st.composite
def traces(draw: st.DrawFn) -> Trace:
    prompt = draw(st.lists(st.integers(0, 1000), min_size=1, max_size=12))
    mask = draw(st.lists(st.integers(0, 1), min_size=0, max_size=16))
    response = draw(st.lists(st.integers(0, 1000), min_size=len(mask), max_size=len(mask)))
    logprobs = [-(i + 1) / 10 if m else 0.0 for i, m in enumerate(mask)]
    return Trace(
        prompt_ids=prompt,
        response_ids=response,
        loss_mask=mask,
        response_logprobs=logprobs,
        finish_reason=draw(st.sampled_from(["stop", "length", None])),
    )


@st.composite
def results(draw: st.DrawFn) -> list[JobResult]:
    out = []
    for group in range(draw(st.integers(1, 3))):
        for sample in range(draw(st.integers(1, 3))):
            out.append(
                JobResult(
                    job_id=f"g{group}-s{sample}",
                    state=JobState.done,
                    handler="h",
                    reward=draw(st.sampled_from([0.0, 1.0])),
                    trajectory=Trajectory(traces=draw(st.lists(traces(), min_size=0, max_size=2))),
                    metadata={"group_id": f"g{group}"},
                )
            )
    return out


def multi_turn_trace(reward: float | None = None) -> Trace:
    return Trace(
        prompt_ids=[1, 2, 3],
        response_ids=[10, 11, 20, 21, 12],
        loss_mask=[1, 1, 0, 0, 1],
        response_logprobs=[-0.1, -0.2, 0.0, 0.0, -0.3],
        prompt_messages=[{"role": "system", "content": "s"}, {"role": "user", "content": "q"}],
        response_messages=[
            {"role": "assistant", "content": "call"},
            {"role": "tool", "content": "out"},
            {"role": "assistant", "content": "done"},
        ],
        finish_reason="stop",
        reward=reward,
    )


@settings(max_examples=80, deadline=None)
@given(batch=results(), pad=st.integers(0, 5))
def test_verl_rows_rebuild_every_trace(batch: list[JobResult], pad: int) -> None:
    out = to_verl(batch, pad_token_id=pad)
    samples = flatten(batch)
    assert out["input_ids"].shape[0] == len(samples)
    p_len = out["prompts"].shape[1]
    for row, sample in enumerate(samples):
        t = sample.trace
        attention = out["attention_mask"][row].astype(bool)
        assert out["input_ids"][row][attention].tolist() == t.prompt_ids + t.response_ids
        assert attention[:p_len].tolist() == [False] * (p_len - len(t.prompt_ids)) + [True] * len(
            t.prompt_ids
        )
        n = len(t.response_ids)
        assert out["response_mask"][row, :n].tolist() == t.loss_mask
        assert not out["response_mask"][row, n:].any()
        assert np.allclose(out["rollout_log_probs"][row, :n], t.response_logprobs)
        # Every sample carries its reward, an empty response's in the last column (veRL's index -1).
        assert out["rm_scores"][row].sum() == pytest.approx(sample.reward)
        assert out["rm_scores"][row, n - 1] == pytest.approx(sample.reward)
        assert out["uid"][row] == sample.group_id
        positions = out["position_ids"][row][attention]
        assert positions.tolist() == list(range(len(t.prompt_ids) + n))


def test_verl_length_limits() -> None:
    result = JobResult(job_id="j", state=JobState.done, handler="h", reward=1.0)
    result.trajectory.traces.append(multi_turn_trace())
    with pytest.raises(ValueError, match="max_response_length"):
        to_verl([result], pad_token_id=0, max_response_length=3)
    out = to_verl([result], pad_token_id=0, max_prompt_length=2, max_response_length=3, truncate=True)
    assert out["prompts"].tolist() == [[2, 3]]
    assert out["responses"].tolist() == [[10, 11, 20]]
    assert out["rm_scores"].tolist() == [[0.0, 0.0, 1.0]]
    assert "old_log_probs" not in out  # veRL computes them and refuses a batch already holding others


@settings(max_examples=60, deadline=None)
@given(batch=results())
def test_skyrl_lists_are_parallel(batch: list[JobResult]) -> None:
    out = to_skyrl(batch)
    traces_ = [t for r in batch for t in r.trajectory.traces]
    assert out["prompt_token_ids"] == [t.prompt_ids for t in traces_]
    assert out["loss_masks"] == [t.loss_mask for t in traces_]
    assert out["rollout_logprobs"] == [t.response_logprobs for t in traces_]
    assert out["stop_reasons"] == ["length" if t.finish_reason == "length" else "stop" for t in traces_]
    idx = [i for i, r in enumerate(batch) for _ in r.trajectory.traces]
    assert out["traj_idx"] == idx
    assert out["rewards"] == [batch[i].reward for i in idx]
    assert out["is_last_step"] == [k + 1 == len(idx) or idx[k + 1] != i for k, i in enumerate(idx)]
    assert out["rollout_metrics"]["rollout_metrics/num_samples"] == len(traces_)


@settings(max_examples=60, deadline=None)
@given(batch=results())
def test_nemo_rl_message_log_partitions_the_tokens(batch: list[JobResult]) -> None:
    for datum, sample in zip(to_nemo_rl(batch), flatten(batch), strict=True):
        log = datum["message_log"]
        t = sample.trace
        assert [tok for m in log for tok in m["token_ids"]] == t.prompt_ids + t.response_ids
        assert all(len(m["token_ids"]) for m in log)
        sampled = [tok for m in log if m["role"] == "assistant" for tok in m["token_ids"]]
        assert sampled == [tok for tok, m in zip(t.response_ids, t.loss_mask, strict=True) if m]
        lps = [lp for m in log if m["role"] == "assistant" for lp in m["generation_logprobs"]]
        assert lps == [lp for lp, m in zip(t.response_logprobs, t.loss_mask, strict=True) if m]


def test_nemo_rl_roles_and_content_follow_the_messages() -> None:
    [datum] = to_nemo_rl([multi_turn_trace(reward=0.5)], tensor=tuple)
    log = datum["message_log"]
    # No end-of-turn token to cut the prompt's span at: one entry keeps both prompt messages.
    assert [m["role"] for m in log] == ["system", "assistant", "tool", "assistant"]
    assert [m["content"] for m in log] == ["s\nq", "call", "out", "done"]
    assert log[0]["token_ids"] == (1, 2, 3) and [m["role"] for m in log[0]["messages"]] == ["system", "user"]
    assert log[1]["token_ids"] == (10, 11) and log[1]["generation_logprobs"] == (-0.1, -0.2)
    assert datum["total_reward"] == 0.5 and datum["length"] == 3 and datum["loss_multiplier"] == 1.0


def test_slime_samples() -> None:
    ok = JobResult(job_id="a", state=JobState.done, handler="h", reward=1.0, metadata={"group_id": "g"})
    ok.trajectory.traces.append(multi_turn_trace())
    long = JobResult(job_id="b", state=JobState.done, handler="h", reward=0.0, metadata={"group_id": "g"})
    long.trajectory.traces.append(multi_turn_trace().model_copy(update={"finish_reason": "length"}))
    first, second = to_slime_samples([ok, long])
    assert first.tokens == [1, 2, 3, 10, 11, 20, 21, 12]
    assert first.response_length == 5 and first.loss_mask == [1, 1, 0, 0, 1]
    assert first.response == "calldone"
    assert first.status is SlimeStatus.completed and second.status is SlimeStatus.truncated
    assert (first.group_index, second.group_index) == (0, 0)
    assert (first.index, second.index) == (0, 1) and (first.rollout_id, second.rollout_id) == (0, 1)


def test_groups_supply_rewards_and_group_indices() -> None:
    failed = JobResult(
        job_id="f", state=JobState.failed, handler="h", error=StageError(stage="run", type="x", message="m")
    )
    good = JobResult(job_id="ok", state=JobState.done, handler="h", reward=1.0)
    good.trajectory.traces.append(multi_turn_trace())
    groups = [
        Group(
            group_id="g0",
            prompt_index=0,
            instance={},
            policy_version=1,
            results=[good, failed],
            rewards=[1, 0],
        ),
        Group(group_id="g1", prompt_index=1, instance={}, policy_version=1, results=[good], rewards=[0.25]),
    ]
    samples = flatten(groups)
    assert [(s.group_index, s.reward, s.trajectory_index) for s in samples] == [(0, 1.0, 0), (1, 0.25, 2)]


def test_sft_export_filters_and_masks(tmp_path: Path) -> None:
    good = JobResult(job_id="ok", state=JobState.done, handler="h", reward=1.0)
    good.trajectory.traces.append(multi_turn_trace())
    bad = good.model_copy(update={"job_id": "bad", "reward": 0.0})
    failed = good.model_copy(update={"job_id": "f", "state": JobState.failed})
    records = to_sft_records([good, bad, failed], min_reward=1.0)
    assert [r["metadata"]["job_id"] for r in records] == ["ok"]
    assert [m["role"] for m in records[0]["messages"]] == ["system", "user", "assistant", "tool", "assistant"]
    [tokens] = to_sft_records([good], style="tokens")
    assert tokens["input_ids"] == [1, 2, 3, 10, 11, 20, 21, 12]
    assert tokens["labels"] == [IGNORE_INDEX] * 3 + [10, 11, IGNORE_INDEX, IGNORE_INDEX, 12]
    path = tmp_path / "sft.jsonl"
    assert write_jsonl([*records, tokens], path) == 2
    assert [json.loads(line)["reward"] for line in path.read_text().splitlines()] == [1.0, 1.0]


def test_flatten_rejects_unknown_items() -> None:
    with pytest.raises(TypeError):
        flatten([{"not": "a result"}])  # type: ignore[list-item]
    assert flatten([]) == []
