"""AReaL-style reward discounting over a session's completions."""

from __future__ import annotations

from collections.abc import Sequence


def discount_rewards(rewards: Sequence[float | None], gamma: float) -> list[float]:
    """Walk completions in reverse insertion order, adding gamma times the next completion's reward.

    r_i <- r_i + gamma * r_{i+1}; an unset reward counts as 0. With gamma 1.0 and one final reward every
    earlier completion receives the outcome; with gamma 0.0 rewards stay where they were set.
    """
    if not 0.0 <= gamma <= 1.0:
        raise ValueError(f"discount must be within [0, 1], got {gamma}")
    out = [0.0 if r is None else float(r) for r in rewards]
    for i in range(len(out) - 2, -1, -1):
        out[i] += gamma * out[i + 1]
    return out
