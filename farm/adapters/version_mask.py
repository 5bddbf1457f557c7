"""Masking the tokens of turns that spanned a weight publish (a trace's `turn_version_changes`,
farm/agent/versions.py): a trainer that needs every trained token sampled by one known version keeps the
trace and zeroes those tokens' loss mask. The k-th run of loss-mask-1 tokens is the k-th model call; a
change names the token from which the new version served, or None (the server did not say: the whole turn)."""

from __future__ import annotations

from typing import Any

from farm.models.results import Trace


def turn_runs(loss_mask: list[int]) -> list[tuple[int, int]]:
    """(start, end) of each run of 1s in a loss mask, in order: one per model call."""
    runs: list[tuple[int, int]] = []
    start: int | None = None
    for i, bit in enumerate([*loss_mask, 0]):
        if bit and start is None:
            start = i
        elif not bit and start is not None:
            runs.append((start, i))
            start = None
    return runs


def mask_version_changes(trace: Trace) -> list[int]:
    """The trace's loss mask with the tokens of every turn that spanned a publish set to 0 (from the change's
    token on, or the whole turn when it is not known)."""
    mask = list(trace.loss_mask)
    changes: list[dict[str, Any]] = trace.metadata.get("turn_version_changes") or []
    runs = turn_runs(trace.loss_mask)
    for change in changes:
        turn = change.get("turn")
        if not isinstance(turn, int) or not 0 <= turn < len(runs):
            continue
        start, end = runs[turn]
        token = change.get("token")
        first = start + token if isinstance(token, int) and 0 <= token < end - start else start
        mask[first:end] = [0] * (end - first)
    return mask
