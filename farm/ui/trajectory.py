"""One job's trajectory for the viewer: the conversation, each trace's tokens split into loss-mask runs
(token text decoded per token, logprob beside it), stage timeline, reward, artifacts, error, drift flags.

The page opens showing the trajectory: the conversation and the first traces' tokens, unfolded. Only a
very long part (a text over LONG_LINES lines or LONG_CHARS characters) is folded after a preview, behind
a control that says how much it hides. Tokens are fetched per trace (`trace_tokens`) after the page
loads, and the browser builds a turn's token spans only when it scrolls into view, so a 30k-token job's
page still loads its header at once."""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

from farm.jobs.store import AsyncJobStore
from farm.models.results import JobResult, Timings, Trace
from farm.models.termination import reason_for

STAGES = ("queued", "init", "run", "eval")
LONG_LINES, LONG_CHARS = 60, 6000
"""A text longer than either is folded on the page after a preview of PREVIEW_LINES / PREVIEW_CHARS."""
PREVIEW_LINES, PREVIEW_CHARS = 20, 2000
LONG_TOKENS, PREVIEW_TOKENS = 2000, 500
"""A turn of more tokens than LONG_TOKENS shows its first PREVIEW_TOKENS in the token view; the rest folds."""
OPEN_TOKEN_VIEWS = 4
"""Traces whose token view opens with the page; later ones load when the reader unfolds them."""


class Folded(BaseModel):
    """A text split for the page: `head` always shown, `rest` (empty when the text is not long) folded."""

    head: str
    rest: str
    rest_lines: int
    rest_chars: int


def message_text(content: Any) -> str:
    """A message's content as the page shows it: a string as is, content parts by their text (a part
    without text as JSON), anything else as JSON. Plain text: the template escapes it once."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            part["text"] if isinstance(part, dict) and isinstance(part.get("text"), str) else json.dumps(part)
            for part in content
        )
    return json.dumps(content)


def fold(text: str) -> Folded:
    """`head + rest == text`; a text within LONG_LINES and LONG_CHARS is all head."""
    lines = text.count("\n") + 1
    if lines <= LONG_LINES and len(text) <= LONG_CHARS:
        return Folded(head=text, rest="", rest_lines=0, rest_chars=0)
    # the preview ends after PREVIEW_LINES lines, or at the last line end within PREVIEW_CHARS (a long
    # line without one is cut at PREVIEW_CHARS)
    limit, end, found = min(len(text), PREVIEW_CHARS), -1, 0
    while found < PREVIEW_LINES and (nxt := text.find("\n", end + 1, limit)) >= 0:
        end, found = nxt, found + 1
    cut = end + 1 if end >= 0 else limit
    head, rest = text[:cut], text[cut:]
    return Folded(
        head=head, rest=rest, rest_lines=rest.count("\n") + (not rest.endswith("\n")), rest_chars=len(rest)
    )


class Segment(BaseModel):
    """A run of tokens with one loss-mask value: a sampled turn (1) or farm-appended text (0)."""

    mask: int
    start: int
    ids: list[int]
    text: list[str]
    logprobs: list[float]
    policy_version: int | None = None
    """The policy version that sampled this turn (the trace's `turn_policy_versions`); None when masked
    or not recorded."""


class TraceSummary(BaseModel):
    index: int
    prompt_tokens: int
    response_tokens: int
    trained_tokens: int
    finish_reason: str | None
    reward: float | None
    builder: str | None
    drift: list[dict[str, Any]]
    messages: list[dict[str, Any]]
    tool_call_parser: str | None = None
    tool_call_misses: list[dict[str, Any]] = []
    """Turns whose tool calls the parser could not read (farm/agent/loop.py)."""
    flag: str | None = None
    turn_parses: list[dict[str, Any]] = []
    """Each assistant turn's parse outcome (farm/agent/parse_outcomes.py)."""


class JobView(BaseModel):
    job_id: str
    state: str
    handler: str
    reward: float | None
    timeline: list[tuple[str, float]]
    queued_s: float
    trace_id: str | None = None
    """The job's OpenTelemetry trace (farm/tracing.py) when tracing was on."""
    in_stage_s: float
    error: dict[str, Any] | None
    artifacts: dict[str, str]
    traces: list[TraceSummary]
    termination_reason: str | None = None
    """Why the trajectory ended (farm/models/termination.py); None while the job has no result."""


class TraceTokens(BaseModel):
    index: int
    prompt_text: str
    segments: list[Segment]


async def pending_view(store: AsyncJobStore, job_id: str) -> JobView | None:
    """A job without a result yet (queued or in a stage): its state and stage times so far."""
    record = await store.progress(job_id)
    if record is None:
        return None
    t = record.timings()
    return JobView(
        job_id=job_id,
        state=record.state.value,
        handler=record.spec.handler,
        reward=None,
        timeline=_timeline(t),
        queued_s=t.queued,
        in_stage_s=t.in_stages,
        error=None,
        artifacts={},
        traces=[],
    )


async def load_result(store: AsyncJobStore, job_id: str) -> JobResult | None:
    peek = await store.peek(job_id)
    return JobResult.model_validate_json(peek.result_json) if peek and peek.result_json else None


def _artifact_text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, indent=2, default=str)


def summarize_trace(index: int, trace: Trace) -> TraceSummary:
    drift = trace.metadata.get("drift") or []
    return TraceSummary(
        index=index,
        prompt_tokens=len(trace.prompt_ids),
        response_tokens=len(trace.response_ids),
        trained_tokens=sum(trace.loss_mask),
        finish_reason=trace.finish_reason,
        reward=trace.reward,
        builder=trace.metadata.get("builder"),
        drift=drift if isinstance(drift, list) else [{"detail": drift}],
        messages=[*trace.prompt_messages, *trace.response_messages],
        tool_call_parser=trace.metadata.get("tool_call_parser"),
        tool_call_misses=[m for m in trace.metadata.get("tool_call_misses") or [] if isinstance(m, dict)],
        flag=trace.metadata.get("flag") if isinstance(trace.metadata.get("flag"), str) else None,
        turn_parses=[t for t in trace.metadata.get("turn_parses") or [] if isinstance(t, dict)],
    )


def _timeline(t: Timings) -> list[tuple[str, float]]:
    return [(stage, float(getattr(t, stage))) for stage in STAGES]


def job_view(result: JobResult) -> JobView:
    t = result.timings
    return JobView(
        job_id=result.job_id,
        state=result.state.value,
        handler=result.handler,
        reward=result.reward,
        timeline=_timeline(t),
        queued_s=t.queued,
        trace_id=result.metadata.get("trace_id")
        if isinstance(result.metadata.get("trace_id"), str)
        else None,
        in_stage_s=t.in_stages,
        error=result.error.model_dump() if result.error else None,
        artifacts={k: _artifact_text(v) for k, v in result.artifacts.items()},
        traces=[summarize_trace(i, tr) for i, tr in enumerate(result.trajectory.traces)],
        termination_reason=reason_for(result).value,
    )


def segments(trace: Trace, texts: list[str]) -> list[Segment]:
    out: list[Segment] = []
    start = 0
    n = len(trace.response_ids)
    versions = trace.metadata.get("turn_policy_versions") or []
    turn = 0
    for i in range(1, n + 1):
        if i == n or trace.loss_mask[i] != trace.loss_mask[start]:
            sampled = trace.loss_mask[start] == 1
            version = versions[turn] if sampled and turn < len(versions) else None
            out.append(
                Segment(
                    mask=trace.loss_mask[start],
                    start=start,
                    ids=trace.response_ids[start:i],
                    text=texts[start:i],
                    logprobs=trace.response_logprobs[start:i],
                    policy_version=version if isinstance(version, int) else None,
                )
            )
            turn += sampled
            start = i
    return out


def decoder(trace: Trace) -> Any:
    """The trace's tokenizer (metadata `tokenizer`, else the shipped one); None if it cannot be loaded."""
    try:
        from farm.chat.tokenizer import ChatTokenizer

        return ChatTokenizer.load(trace.metadata.get("tokenizer")).hf
    except Exception:  # a missing tokenizer degrades to showing ids
        return None


def trace_tokens(index: int, trace: Trace) -> TraceTokens:
    hf = decoder(trace)
    if hf is not None and all(0 <= i < len(hf) for i in trace.response_ids):
        texts = hf.batch_decode([[i] for i in trace.response_ids], skip_special_tokens=False)
        prompt = hf.decode(trace.prompt_ids, skip_special_tokens=False)
    else:
        texts = [f"⟨{i}⟩" for i in trace.response_ids]
        prompt = " ".join(map(str, trace.prompt_ids))
    return TraceTokens(index=index, prompt_text=prompt, segments=segments(trace, texts))
