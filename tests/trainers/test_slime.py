"""slime accepts the farm's samples: a checker of slime's rules, written from reading its code.

Rules encoded (THUDM/slime @ 624b824a898ab0ec1fcb4d373004c7f3852bf515):
- slime/utils/types.py `Sample`: group_index, index, rollout_id, prompt, tokens, response,
  response_length, label, reward, loss_mask, rollout_log_probs, status in
  pending/completed/truncated/aborted/failed.
- slime/ray/rollout.py `_convert_samples_to_train_data`: loss_mask as long as response_length,
  `truncated` from status TRUNCATED, rollout_ids (None falls back to a fresh id) aggregate loss per
  rollout; `_post_process_rewards` reshapes rewards to (-1, n_samples_per_prompt) for GRPO, so each
  group's samples are adjacent.
- slime/observability/rollout_data_utils.py `validate_rollout_id_annotated`: in a nested
  prompt x rollout x samples output every sibling of one rollout carries the same non-None rollout_id.
"""

from __future__ import annotations

from typing import Any

import pytest

from farm.adapters import SlimeStatus, to_slime_groups, to_slime_samples
from tests.trainers import farm_rollouts

FIELDS = {
    "group_index",
    "index",
    "rollout_id",
    "prompt",
    "tokens",
    "response",
    "response_length",
    "label",
    "reward",
    "loss_mask",
    "rollout_log_probs",
    "status",
}


def check_samples(samples: list[dict[str, Any]]) -> None:
    assert samples
    for s in samples:
        assert set(s) >= FIELDS, FIELDS - set(s)
        assert s["status"] in {"pending", "completed", "truncated", "aborted", "failed"}
        assert len(s["loss_mask"]) == s["response_length"] == len(s["rollout_log_probs"])
        assert s["response_length"] <= len(s["tokens"])
        assert s["rollout_id"] is not None
    groups = [s["group_index"] for s in samples]
    assert groups == sorted(groups), "samples of a group must be adjacent (GRPO reshape)"
    assert len({s["index"] for s in samples}) == len(samples)


def check_nested(node: Any, depth: int = 0) -> None:
    if isinstance(node, dict):
        return
    assert isinstance(node, list)
    if node and isinstance(node[0], dict) and depth >= 2 and len(node) > 1:
        assert len({s["rollout_id"] for s in node}) == 1, "siblings of one rollout share rollout_id"
    for item in node:
        check_nested(item, depth + 1)


def test_slime_accepts_real_farm_trajectories() -> None:
    samples = to_slime_samples(farm_rollouts.results())
    check_samples([s.model_dump(mode="json") for s in samples])
    assert [s.status for s in samples].count(SlimeStatus.truncated) == 1
    per_turn = [s for s in samples if s.metadata["job_id"] == "g-a-1"]
    assert len(per_turn) == 2 and per_turn[0].rollout_id == per_turn[1].rollout_id
    assert all(s.label == "42" for s in samples)
    nested = [
        [[s.model_dump(mode="json") for s in r] for r in g] for g in to_slime_groups(farm_rollouts.results())
    ]
    check_nested(nested)
    assert [len(g) for g in nested] == [3, 3]


def test_checker_rejects_interleaved_groups() -> None:
    samples = [s.model_dump(mode="json") for s in to_slime_samples(farm_rollouts.results())]
    samples[0], samples[-1] = samples[-1], samples[0]
    with pytest.raises(AssertionError, match="adjacent"):
        check_samples(samples)
