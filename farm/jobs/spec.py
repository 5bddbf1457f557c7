"""What a job was asked to do, as stored in its Redis record and handed to every stage."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, Field

from farm.models.requests import SamplingParams


class JobSpec(BaseModel):
    job_id: str
    handler: str
    instance: dict[str, Any]
    sampling_params: SamplingParams = Field(default_factory=SamplingParams)
    timeout_s: float
    """Budget for time inside stages."""
    metadata: dict[str, Any] = Field(default_factory=dict)
    task_id: str | None = None
    sample_index: int = 0
    runtime: dict[str, Any] = Field(default_factory=dict)
    agent: dict[str, Any] = Field(default_factory=dict)
    builder: dict[str, Any] = Field(default_factory=dict)
    evaluator: dict[str, Any] = Field(default_factory=dict)
    callback_url: str | None = None
    submitted_at: float = 0.0
    priority: int = 0
    """0 (normal) to 9 (most urgent), for the order in which init takes waiting jobs."""
    traceparent: str | None = None
    """The W3C trace context of the job's root span when tracing is on (farm/tracing.py): every stage's
    span, in whichever worker, joins that trace."""


def session_id(task_id: str, index: int) -> str:
    """Job id of a task's session. `~` never appears in caller-chosen ids, so the two never collide."""
    return f"{task_id}~{index}"
