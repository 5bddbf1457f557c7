"""The trainer-facing result shapes: JobResult and the token-faithful Trace (docs/CONTRACT.md "Results")."""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator


class JobState(StrEnum):
    queued = "queued"
    init = "init"
    run = "run"
    eval = "eval"
    done = "done"
    failed = "failed"
    cancelled = "cancelled"
    timeout = "timeout"

    @property
    def terminal(self) -> bool:
        return self in TERMINAL_STATES


TERMINAL_STATES = frozenset({JobState.done, JobState.failed, JobState.cancelled, JobState.timeout})
STAGES = ("init", "run", "eval")


class Trace(BaseModel):
    """One trainable sequence. Every token with loss_mask 1 is exactly a token the backend sampled."""

    model_config = ConfigDict(extra="allow")

    prompt_ids: list[int]
    response_ids: list[int]
    loss_mask: list[int]
    """1 where the token was sampled by the policy, 0 for tool output and template interstitials."""
    response_logprobs: list[float]
    """Aligned with response_ids; 0.0 where masked."""
    prompt_messages: list[dict[str, Any]] = Field(default_factory=list)
    response_messages: list[dict[str, Any]] = Field(default_factory=list)
    tools: list[dict[str, Any]] = Field(default_factory=list)
    finish_reason: str | None = None
    reward: float | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _aligned(self) -> Trace:
        n = len(self.response_ids)
        if len(self.loss_mask) != n or len(self.response_logprobs) != n:
            raise ValueError(
                f"response_ids ({n}), loss_mask ({len(self.loss_mask)}) and response_logprobs "
                f"({len(self.response_logprobs)}) must have the same length"
            )
        if any(m not in (0, 1) for m in self.loss_mask):
            raise ValueError("loss_mask holds only 0 and 1")
        return self


class Trajectory(BaseModel):
    traces: list[Trace] = Field(default_factory=list)


class StageError(BaseModel):
    stage: str
    """init, run, eval, or queue/api for failures outside a stage."""
    type: str
    message: str

    @classmethod
    def of(cls, stage: str, exc: BaseException) -> StageError:
        """The error an exception ends `stage` with (its class name and message, bounded)."""
        return cls(stage=stage, type=type(exc).__name__, message=str(exc)[:2000])


class Timings(BaseModel):
    """Seconds. `queued` is time waiting in queues; it never counts against a job's budget."""

    model_config = ConfigDict(extra="allow")

    queued: float = 0.0
    init: float = 0.0
    run: float = 0.0
    eval: float = 0.0

    @property
    def in_stages(self) -> float:
        return self.init + self.run + self.eval


class JobResult(BaseModel):
    model_config = ConfigDict(extra="allow")

    job_id: str
    state: JobState
    handler: str
    reward: float | None = None
    trajectory: Trajectory = Field(default_factory=Trajectory)
    artifacts: dict[str, Any] = Field(default_factory=dict)
    timings: Timings = Field(default_factory=Timings)
    error: StageError | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
