"""`per_request`: every recorded completion becomes its own trace (lossless, one sample per call)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from farm.agent.parse_outcomes import classify_reply
from farm.builders.records import CompletionRecord, turn_versions
from farm.models import Trace


def build_per_request(
    records: Sequence[CompletionRecord], metadata: dict[str, Any] | None = None
) -> list[Trace]:
    traces: list[Trace] = []
    for record in records:
        if not record.has_tokens:
            continue
        n = len(record.response_ids)
        logprobs_ok = record.response_logprobs is not None and len(record.response_logprobs) == n
        traces.append(
            Trace(
                prompt_ids=list(record.prompt_ids),
                response_ids=list(record.response_ids),
                loss_mask=[1] * n,
                response_logprobs=list(record.response_logprobs) if logprobs_ok else [0.0] * n,  # type: ignore[arg-type]
                prompt_messages=record.request_messages,
                response_messages=[record.response_message] if record.response_message else [],
                tools=record.tools,
                finish_reason=record.finish_reason,
                reward=record.reward,
                metadata={
                    **(metadata or {}),
                    "builder": "per_request",
                    "session_id": record.session_id,
                    "completion_ids": [record.completion_id],
                    "backend": record.backend,
                    "logprobs_available": logprobs_ok,
                    "turn_parses": [classify_reply(1, record.response_message, record.tools).record()],
                    **turn_versions([record]),
                },
            )
        )
    return traces
