"""Splitting a trace into loss-mask runs for the trajectory view (pure logic)."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from farm.models.results import Trace
from farm.ui.trajectory import (
    LONG_CHARS,
    LONG_LINES,
    PREVIEW_CHARS,
    PREVIEW_LINES,
    fold,
    segments,
    trace_tokens,
)


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


@given(st.text(alphabet=st.sampled_from("ab \n"), max_size=20_000))
def test_fold_keeps_every_character_and_folds_only_long_text(text: str) -> None:
    folded = fold(text)
    assert folded.head + folded.rest == text
    long = text.count("\n") + 1 > LONG_LINES or len(text) > LONG_CHARS
    assert bool(folded.rest) == long
    if long:
        assert folded.head.count("\n") <= PREVIEW_LINES and len(folded.head) <= PREVIEW_CHARS
        assert folded.rest_chars == len(folded.rest)
        # the rest's line count as a reader counts lines (a last line without a newline is one)
        assert folded.rest_lines == len(folded.rest.splitlines())


def test_fold_of_a_long_tool_result_shows_its_first_lines() -> None:
    text = "\n".join(f"line {i}" for i in range(150))
    folded = fold(text)
    assert folded.head == "".join(f"line {i}\n" for i in range(PREVIEW_LINES))
    assert folded.rest_lines == 150 - PREVIEW_LINES
    assert fold("x" * (LONG_CHARS + 1)).head == "x" * PREVIEW_CHARS  # one long line: cut at the char limit


def test_message_text_and_folded_parts_are_escaped_once() -> None:
    """Tool output is text: markup in it is shown, not run, and not escaped twice, folded or not."""
    from farm.models.results import JobResult, JobState, Trajectory
    from farm.ui.routes import templates
    from farm.ui.trajectory import job_view, message_text

    assert message_text([{"type": "text", "text": "a"}, {"type": "image"}]) == 'a{"type": "image"}'
    assert message_text({"k": 1}) == '{"k": 1}' and message_text("<b>") == "<b>"
    evil = "<script>alert(1)</script> & <b>x</b>"
    long_evil = "\n".join([evil] * (LONG_LINES + 5))
    parts = [{"type": "text", "text": long_evil}]
    messages = [{"role": "tool", "content": evil}, {"role": "tool", "content": parts}]
    trace = Trace(prompt_ids=[1], response_ids=[2], loss_mask=[1], response_logprobs=[-0.1])
    trace.response_messages = messages
    result = JobResult(job_id="j", state=JobState.done, handler="math", trajectory=Trajectory(traces=[trace]))
    html = templates.env.get_template("job.html.j2").render(job=job_view(result), active="job")
    escaped = "&lt;script&gt;alert(1)&lt;/script&gt; &amp; &lt;b&gt;x&lt;/b&gt;"
    assert "<script>alert" not in html and "&amp;lt;" not in html
    assert html.count(escaped) == 1 + LONG_LINES + 5
    assert "folded: show them" in html


def test_the_job_page_shows_the_trace_id_when_the_job_was_traced() -> None:
    from farm.models.results import JobResult, JobState
    from farm.ui.routes import templates
    from farm.ui.trajectory import job_view

    traced = JobResult(job_id="j", state=JobState.done, handler="math", metadata={"trace_id": "ab" * 16})
    html = templates.env.get_template("job.html.j2").render(job=job_view(traced), active="job")
    assert f'<code id="trace-id">{"ab" * 16}</code>' in html
    plain = JobResult(job_id="j", state=JobState.done, handler="math")
    assert 'id="trace-id"' not in templates.env.get_template("job.html.j2").render(
        job=job_view(plain), active="job"
    )
