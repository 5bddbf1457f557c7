"""The record of one model call captured by the gateway: what the builders turn into traces."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field


class CompletionTimings(BaseModel):
    started_at: float = 0.0
    """Unix time the gateway received the request."""
    upstream_s: float = 0.0
    """Seconds spent waiting on the inference backend (all attempts)."""
    total_s: float = 0.0


class CallFailure(BaseModel):
    """Why a model call produced no completion: the gateway's error class and the status the client saw."""

    error_class: str
    """context_overflow, invalid_request (a refused tool, an unreadable body), upstream (the backend failed
    or broke the protocol), unavailable (no backend), timeout."""
    status: int
    message: str

    def summary(self, record: CompletionRecord) -> dict[str, Any]:
        """The entry in an export's `failed_calls`."""
        return {
            "class": self.error_class,
            "status": self.status,
            "provider": record.provider,
            "at": record.timings.started_at,
            "completion_id": record.completion_id,
            "message": self.message[:500],
        }


class CompletionRecord(BaseModel):
    """One recorded completion. Token ids are what the backend saw and sampled, never re-tokenized text."""

    completion_id: str
    session_id: str
    index: int = 0
    """Position in the session's append-only log (insertion order)."""
    provider: str = "openai_chat"
    model: str | None = None
    request_messages: list[dict[str, Any]] = Field(default_factory=list)
    """The normalised (OpenAI chat) messages sent upstream."""
    tools: list[dict[str, Any]] = Field(default_factory=list)
    prompt_ids: list[int] = Field(default_factory=list)
    response_ids: list[int] = Field(default_factory=list)
    """Every sampled token, including the end-of-turn token or matched stop string."""
    response_logprobs: list[float] | None = None
    """Aligned with response_ids; None when the backend gave none or they did not line up."""
    finish_reason: str | None = None
    response_message: dict[str, Any] = Field(default_factory=dict)
    backend: str | None = None
    policy_version: int | None = None
    """The weights that sampled this completion: the backend's own word (SGLang's `metadata.weight_version`)
    when it gives one, else the policy_version the pool had registered for the backend when the call was
    sent; None when neither is known."""
    policy_version_source: str | None = None
    """Where policy_version came from: "backend", "pool" or "unknown"."""
    timings: CompletionTimings = Field(default_factory=CompletionTimings)
    usage: dict[str, int] = Field(default_factory=dict)
    reward: float | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    error: CallFailure | None = None
    """Set on a failed call (kept in the session's failure log, never in its completions)."""

    @property
    def has_tokens(self) -> bool:
        return bool(self.prompt_ids) and bool(self.response_ids)


def turn_versions(records: list[CompletionRecord]) -> dict[str, Any]:
    """A trace's per-call policy versions (the keys the agent loop's traces carry): one per model call, in
    the order of the trace's runs of loss-mask-1 tokens, with where each came from."""
    versions = [r.policy_version for r in records]
    known = [v for v in versions if v is not None]
    return {
        "turn_policy_versions": versions,
        "turn_policy_version_sources": [r.policy_version_source or "unknown" for r in records],
        "policy_version_span": [min(known), max(known)] if known else None,
    }
