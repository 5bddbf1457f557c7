"""The warm pool's budget (tasks/warm.py): what an init worker may hold started ahead."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tasks.warm import pool_budget

counts = st.integers(min_value=0, max_value=10_000)


def test_examples() -> None:
    assert pool_budget(0, 64, 0, 500, 4) == 0  # off
    assert pool_budget(32, 64, 0, 0, 4) == 4  # nothing queued: what the worker can claim at once
    assert pool_budget(32, 64, 0, 500, 4) == 32  # a deep queue: up to the setting
    assert pool_budget(32, 64, 50, 500, 4) == 14  # the READY buffer's free slots bound it
    assert pool_budget(32, 64, 64, 500, 4) == 0  # a full buffer: nothing more waits prepared
    assert pool_budget(32, 0, 900, 500, 4) == 32  # an unbounded buffer


@given(counts, counts, counts, counts, st.integers(min_value=1, max_value=256))
def test_bounds(limit: int, buffer: int, held: int, queued: int, concurrency: int) -> None:
    budget = pool_budget(limit, buffer, held, queued, concurrency)
    assert 0 <= budget <= limit
    if buffer > 0:
        assert budget <= max(0, buffer - held)
    assert budget <= max(queued, concurrency)
