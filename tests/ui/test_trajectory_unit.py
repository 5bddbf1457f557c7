"""Splitting a trace into loss-mask runs for the trajectory view (pure logic)."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from farm.models.results import Trace
from farm.ui.trajectory import segments, trace_tokens


@given(st.lists(st.tuples(st.integers(0, 1), st.floats(-20, 0)), max_size=200))
def test_segments_cover_the_trace_in_order_with_one_mask_each(tokens: list[tuple[int, float]]) -> None:
    trace = Trace(
        prompt_ids=[1],
        response_ids=list(range(len(tokens))),
        loss_mask=[m for m, _ in tokens],
        response_logprobs=[lp for _, lp in tokens],
    )
    segs = segments(trace, [str(i) for i in trace.response_ids])
    assert [i for s in segs for i in s.ids] == trace.response_ids
    assert [lp for s in segs for lp in s.logprobs] == trace.response_logprobs
    for s in segs:
        assert trace.loss_mask[s.start : s.start + len(s.ids)] == [s.mask] * len(s.ids)
    assert all(a.mask != b.mask for a, b in itertools.pairwise(segs))


def test_ids_outside_the_vocabulary_are_shown_as_ids() -> None:
    trace = Trace(prompt_ids=[5], response_ids=[10**9], loss_mask=[1], response_logprobs=[-0.5])
    out = trace_tokens(0, trace)
    assert out.segments[0].text == ["⟨1000000000⟩"]
