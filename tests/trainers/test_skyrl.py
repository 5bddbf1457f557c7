"""SkyRL accepts the farm's GeneratorOutput: a checker of SkyRL's rules, written from reading its code.

Rules encoded (NovaSky-AI/SkyRL @ a9564572eb8e91076be43c1bd5e4615e3de17265):
- skyrl/train/generators/base.py `GeneratorOutput`: prompt_token_ids, response_ids, rewards,
  loss_masks, stop_reasons, rollout_logprobs, trajectory_ids, is_last_step.
- skyrl/train/utils/trainer_utils.py `validate_generator_output`: one response per prompt (or, step-wise,
  `is_last_step`/`trajectory_ids` present, sized, contiguous, last entry True); per-sample lists as long
  as response_ids; rewards all floats or all per-token lists.
- skyrl/train/generators/utils.py `apply_overlong_filtering`: every sample whose stop reason is not
  "stop" loses its whole loss mask, so stop reasons must be the engine's stop/length.
"""

from __future__ import annotations

from typing import Any

import pytest

from farm.adapters import flatten, to_skyrl
from tests.trainers import farm_rollouts

PER_SAMPLE = (
    "response_ids",
    "loss_masks",
    "rewards",
    "rollout_logprobs",
    "stop_reasons",
    "trajectory_ids",
    "is_last_step",
)


def check_generator_output(num_prompts: int, out: dict[str, Any], *, step_wise: bool) -> None:
    n = len(out["response_ids"])
    assert n > 0
    assert len(out["prompt_token_ids"]) == n
    if not step_wise:
        assert num_prompts == n
    for key in PER_SAMPLE:
        assert key in out, key
        assert len(out[key]) == n, key
    for i, (ids, mask, logprobs) in enumerate(
        zip(out["response_ids"], out["loss_masks"], out["rollout_logprobs"], strict=True)
    ):
        assert len(ids) == len(mask) == len(logprobs), i
        assert set(mask) <= {0, 1}
    rewards = out["rewards"]
    assert all(isinstance(r, list) for r in rewards) or all(isinstance(r, int | float) for r in rewards)
    assert set(out["stop_reasons"]) <= {"stop", "length"}, "stop reasons are the engine's, not the handler's"
    if step_wise:
        last, ids = out["is_last_step"], [t.to_string() for t in out["trajectory_ids"]]
        assert last[-1] is True
        seen: set[str] = set()
        for i, tid in enumerate(ids):
            if i and tid != ids[i - 1]:
                assert ids[i - 1] not in seen, "non-contiguous trajectory"
                seen.add(ids[i - 1])
                assert last[i - 1], "is_last_step must close each trajectory"
            if i + 1 < n and ids[i + 1] == tid:
                assert not last[i]
        assert tid not in seen


def overlong_filtered(out: dict[str, Any]) -> list[list[int]]:
    return [
        [0] * len(m) if r != "stop" else m
        for m, r in zip(out["loss_masks"], out["stop_reasons"], strict=True)
    ]


def test_skyrl_accepts_real_farm_trajectories() -> None:
    results = farm_rollouts.results()
    out = to_skyrl(results)
    check_generator_output(len(results), out, step_wise=True)
    samples = flatten(results)
    assert out["rewards"] == [s.reward for s in samples]
    # Only the sample whose last turn hit max_tokens is dropped by DAPO's overlong filter.
    # GRPO groups by TrajectoryID.instance_id: the prompt, with one repetition per job.
    assert {t.instance_id for t in out["trajectory_ids"]} == {"g-a", "g-b"}
    assert sorted({t.to_string() for t in out["trajectory_ids"]}) == [
        f"g-{g}_{n}" for g in "ab" for n in range(3)
    ]
    kept = [bool(sum(m)) for m in overlong_filtered(out)]
    assert kept == [s.trace.finish_reason != "length" for s in samples]
    assert kept.count(False) == 1


def test_single_trace_jobs_are_one_response_per_prompt() -> None:
    results = [r for r in farm_rollouts.results() if len(r.trajectory.traces) == 1]
    out = to_skyrl(results)
    check_generator_output(len(results), out, step_wise=False)
    assert all(out["is_last_step"])


def test_checker_rejects_handler_finish_reasons() -> None:
    out = to_skyrl(farm_rollouts.results())
    bad = {**out, "stop_reasons": ["answer"] * len(out["stop_reasons"])}
    with pytest.raises(AssertionError, match="engine"):
        check_generator_output(0, bad, step_wise=True)
    assert not any(sum(m) for m in overlong_filtered(bad))  # what the handler's reasons would do


def test_bare_traces_keep_their_trajectories_and_groups() -> None:
    out = to_skyrl(farm_rollouts.traces())
    check_generator_output(6, out, step_wise=True)
    assert out["is_last_step"].count(True) == 6
    assert {t.instance_id for t in out["trajectory_ids"]} == {"g-a", "g-b"}
