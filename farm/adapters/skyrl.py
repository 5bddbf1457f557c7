"""SkyRL's `GeneratorOutput` (skyrl/train/generators/base.py): parallel lists, one entry per trace.

Jobs with several traces (one per turn) are step-wise output: `trajectory_ids` and `is_last_step` mark
which traces belong to one trajectory, adjacent as SkyRL requires. `stop_reasons` are the engine's
(`stop` / `length`), which SkyRL's DAPO overlong filter reads.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from statistics import fmean
from typing import Any, cast

from farm.adapters.samples import Source, engine_stop_reason, flatten, infrastructure_failures
from farm.adapters.termination import TerminationRules


@dataclass(frozen=True)
class TrajectoryID:
    """The fields of SkyRL's `TrajectoryID`: the prompt (GRPO group) and the sample's repetition in it."""

    instance_id: str
    repetition_id: int

    def to_string(self) -> str:
        return f"{self.instance_id}_{self.repetition_id}"


def to_skyrl(
    source: Source,
    *,
    trajectory_id: Callable[..., Any] = TrajectoryID,
    termination: TerminationRules | None = None,
) -> dict[str, Any]:
    """`trajectory_id`: pass SkyRL's own `TrajectoryID` class to get its objects (called with
    `instance_id=group_id, repetition_id=n`); `traj_idx` maps each trace to its trajectory (job)."""
    items = cast(Source, list(source))  # read twice: the samples, and the jobs left out
    samples = flatten(items, termination)
    infra_failed: int = sum(infrastructure_failures(items).values())
    response_lengths = [len(s.trace.response_ids) for s in samples]
    positions = [s.trajectory_index for s in samples]
    repetitions: dict[str, dict[int, int]] = {}
    ids = []
    for s in samples:
        seen = repetitions.setdefault(s.group_id, {})
        ids.append(
            trajectory_id(
                instance_id=s.group_id, repetition_id=seen.setdefault(s.trajectory_index, len(seen))
            )
        )
    return {
        "prompt_token_ids": [list(s.trace.prompt_ids) for s in samples],
        "response_ids": [list(s.trace.response_ids) for s in samples],
        "rewards": [s.reward for s in samples],
        "loss_masks": [list(s.trace.loss_mask) for s in samples],
        "rollout_logprobs": [list(s.trace.response_logprobs) for s in samples],
        "stop_reasons": [engine_stop_reason(s.trace) for s in samples],
        "trajectory_ids": ids,
        "is_last_step": [i + 1 == len(positions) or positions[i + 1] != p for i, p in enumerate(positions)],
        "traj_idx": positions,
        "rollout_metrics": {
            "rollout_metrics/num_samples": len(samples),
            "rollout_metrics/num_trajectories": len(set(positions)),
            "rollout_metrics/mean_reward": fmean(s.reward for s in samples) if samples else 0.0,
            "rollout_metrics/mean_response_length": fmean(response_lengths) if samples else 0.0,
            "rollout_metrics/max_response_length": max(response_lengths, default=0),
            "rollout_metrics/trained_tokens": sum(sum(s.trace.loss_mask) for s in samples),
            # jobs left out, never scored (farm.models.failures), so a climbing rate shows in the logs
            "rollout_metrics/infra_failed": infra_failed,
            **{
                f"rollout_metrics/finish_reason/{reason}": count
                for reason, count in Counter(str(s.trace.finish_reason) for s in samples).items()
            },
            **{
                f"rollout_metrics/termination_reason/{reason}": count
                for reason, count in Counter(str(s.termination_reason) for s in samples).items()
            },
            "rollout_metrics/masked_by_reason": sum(s.masked for s in samples),
        },
    }
