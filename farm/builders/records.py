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
    timings: CompletionTimings = Field(default_factory=CompletionTimings)
    usage: dict[str, int] = Field(default_factory=dict)
    reward: float | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    error: CallFailure | None = None
    """Set on a failed call (kept in the session's failure log, never in its completions)."""

    @property
    def has_tokens(self) -> bool:
        return bool(self.prompt_ids) and bool(self.response_ids)
