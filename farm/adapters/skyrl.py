"""SkyRL-Agent's backend-agnostic `post_process` dict (seed 004, Listing 3)."""

from __future__ import annotations

from collections import Counter
from statistics import fmean
from typing import Any

from farm.adapters.samples import Source, flatten


def to_skyrl(source: Source) -> dict[str, Any]:
    """Parallel lists, one entry per trace; `traj_idx` maps each trace to its trajectory (job)."""
    samples = flatten(source)
    response_lengths = [len(s.trace.response_ids) for s in samples]
    return {
        "prompt_token_ids": [list(s.trace.prompt_ids) for s in samples],
        "response_ids": [list(s.trace.response_ids) for s in samples],
        "logprobs": [list(s.trace.response_logprobs) for s in samples],
        "loss_masks": [list(s.trace.loss_mask) for s in samples],
        "traj_rewards": [s.reward for s in samples],
        "traj_idx": [s.trajectory_index for s in samples],
        "rollout_metrics": {
            "rollout_metrics/num_samples": len(samples),
            "rollout_metrics/num_trajectories": len({s.trajectory_index for s in samples}),
            "rollout_metrics/mean_reward": fmean(s.reward for s in samples) if samples else 0.0,
            "rollout_metrics/mean_response_length": fmean(response_lengths) if samples else 0.0,
            "rollout_metrics/max_response_length": max(response_lengths, default=0),
            "rollout_metrics/trained_tokens": sum(sum(s.trace.loss_mask) for s in samples),
            **{
                f"rollout_metrics/finish_reason/{reason}": count
                for reason, count in Counter(str(s.trace.finish_reason) for s in samples).items()
            },
        },
    }
