"""A model call's span in the trace of the rollout that made it: a harness's run stage puts its span's
context in the gateway session's metadata (`traceparent`), and each call the session serves becomes a
`gateway.call` span under it, exported by the process that served the call.

The span is made from the call's record once the call is answered (its timings say when it ran), so a
call pays nothing while it runs; a session without a traceparent (tracing off in the worker) costs one
dict lookup."""

from __future__ import annotations

from typing import Any

from farm import tracing
from farm.builders.records import CompletionRecord
from farm.gateway.sessions import SessionInfo

SPAN_NAME = "gateway.call"


def trace_call(info: SessionInfo | None, record: CompletionRecord) -> None:
    """Report the call of `record` (a completion, or a failure with its `error`) as a span of its session's
    trace; nothing when the session carries no trace context."""
    traceparent = info.metadata.get(tracing.TRACEPARENT) if info is not None else None
    if not isinstance(traceparent, str) or not traceparent:
        return
    started = record.timings.started_at
    failure = record.error
    tracing.finished_span(
        traceparent,
        SPAN_NAME,
        started,
        started + record.timings.total_s,
        _attributes(record),
        error=f"{failure.error_class}: {failure.message[:200]}" if failure is not None else None,
    )


def _attributes(record: CompletionRecord) -> dict[str, Any]:
    failure = record.error
    attributes: dict[str, Any] = {
        "farm.gateway.provider": record.provider,
        "farm.gateway.completion_id": record.completion_id,
        "farm.gateway.status": failure.error_class if failure is not None else "ok",
        "farm.gateway.http_status": failure.status if failure is not None else 200,
        "farm.llm.model": record.model,
    }
    if failure is None:
        attributes.update({
            "farm.llm.backend": record.backend,
            "farm.llm.prompt_tokens": len(record.prompt_ids),
            "farm.llm.completion_tokens": len(record.response_ids),
            "farm.llm.finish_reason": record.finish_reason,
            "farm.llm.upstream_s": record.timings.upstream_s,
            "farm.llm.stream": record.metadata.get("stream"),
            "farm.llm.attempts": record.metadata.get("attempts"),
            "farm.policy_version": record.policy_version,
            "farm.policy_version_source": record.policy_version_source,
        })  # fmt: skip
    return attributes
