"""veRL accepts the farm's batch: a checker of veRL's rules, written from reading its code (torch-free).

Rules encoded (volcengine/verl @ b178a3cd56f58b2d502255daba591e92833930a7):
- verl/experimental/agent_loop/agent_loop.py `_postprocess`: the batch keys (prompts, responses,
  response_mask, input_ids, attention_mask, position_ids, rollout_log_probs) and `rm_scores`, zero but
  for the reward at index `attention_mask[:, prompt_len:].sum(-1) - 1` (the last response token).
- verl/trainer/ppo/ray_trainer.py `_compute_or_extract_reward`: an `rm_scores` key is taken as the
  token-level reward; later `batch.union(old_log_prob)` adds the actor's `old_log_probs`, and
  verl/protocol.py `union_tensor_dict` asserts equality for a key already present, so the rollout
  must not carry its own `old_log_probs`.
- verl/protocol.py `check_consistency` / `from_single_dict`: numpy arrays are the non-tensor batch,
  one row per sample; GRPO groups by `uid`. Position ids are `cumsum(attention_mask) - 1`, clipped at 0.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from farm.adapters import flatten, to_verl
from tests.trainers import farm_rollouts

TENSOR_KEYS = {
    "prompts",
    "responses",
    "input_ids",
    "attention_mask",
    "position_ids",
    "response_mask",
    "rollout_log_probs",
    "rm_scores",
}


def check_verl_batch(batch: dict[str, Any]) -> None:
    """Raise AssertionError where veRL's trainer would fail or silently misread the batch."""
    assert set(batch) >= TENSOR_KEYS, f"missing {TENSOR_KEYS - set(batch)}"
    assert "old_log_probs" not in batch, "veRL's union with the actor's old_log_probs would assert"
    size = batch["input_ids"].shape[0]
    p_len, r_len = batch["prompts"].shape[1], batch["responses"].shape[1]
    for key in TENSOR_KEYS:
        value = batch[key]
        assert value.dtype != object and value.shape[0] == size, key
        width = p_len + r_len if key in {"input_ids", "attention_mask", "position_ids"} else None
        width = p_len if key == "prompts" else width or r_len
        assert value.shape == (size, width), (key, value.shape)
    for key in ("input_ids", "attention_mask", "position_ids", "prompts", "responses", "response_mask"):
        assert batch[key].dtype == np.int64, key
    assert np.array_equal(batch["input_ids"], np.concatenate([batch["prompts"], batch["responses"]], axis=1))
    attention = batch["attention_mask"]
    assert np.array_equal(batch["position_ids"], np.clip(np.cumsum(attention, axis=1) - 1, 0, None))
    response_attention = attention[:, p_len:]
    assert not (batch["response_mask"] & (1 - response_attention)).any(), "loss on padding"
    last = response_attention.sum(axis=1) - 1
    scores = batch["rm_scores"]
    for row in range(size):
        others = np.delete(scores[row], last[row])
        assert not others.any(), f"row {row}: reward off the last response token"
    for key, value in batch.items():
        if key not in TENSOR_KEYS and isinstance(value, np.ndarray) and value.dtype == object:
            assert value.shape == (size,), key  # non-tensor batch
    assert batch["uid"].dtype == object


def test_verl_accepts_real_farm_trajectories() -> None:
    results = farm_rollouts.results()
    batch = to_verl(results, pad_token_id=0)
    check_verl_batch(batch)
    samples = flatten(results)
    for row, sample in enumerate(samples):
        n = len(sample.trace.response_ids)
        assert batch["rm_scores"][row, n - 1] == pytest.approx(sample.reward)
        assert batch["response_mask"][row, :n].tolist() == sample.trace.loss_mask
        assert np.allclose(batch["rollout_log_probs"][row, :n], sample.trace.response_logprobs)
    # GRPO groups by uid: the two prompts, whatever order the jobs finished in.
    assert sorted(set(batch["uid"])) == ["g-a", "g-b"]
    assert [u for u in batch["uid"]] == [s.trace.metadata["group_id"] for s in samples]


def test_verl_groups_bare_traces_by_their_group_id() -> None:
    batch = to_verl(farm_rollouts.traces(), pad_token_id=0)
    check_verl_batch(batch)
    assert sorted(set(batch["uid"])) == ["g-a", "g-b"]


def test_verl_truncated_response_keeps_its_reward_on_the_last_kept_token() -> None:
    results = farm_rollouts.results()
    batch = to_verl(results, pad_token_id=0, max_response_length=64, truncate=True)
    check_verl_batch(batch)
    rewarded = [row for row, s in enumerate(flatten(results)) if s.reward]
    assert rewarded, "no rewarded sample: the check below would hold vacuously"
    assert all(batch["rm_scores"][row, 63] == 1.0 for row in rewarded)


def test_checker_rejects_what_veRL_rejects() -> None:
    good = to_verl(farm_rollouts.results(), pad_token_id=0)
    stale = {**good, "old_log_probs": good["rollout_log_probs"].copy()}
    with pytest.raises(AssertionError, match="old_log_probs"):
        check_verl_batch(stale)
    first_token = good["rm_scores"].copy()
    first_token[0] = 0.0
    first_token[0, 0] = 1.0
    with pytest.raises(AssertionError, match="last response token"):
        check_verl_batch({**good, "rm_scores": first_token})
