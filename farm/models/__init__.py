"""Pydantic models of the external contract (docs/CONTRACT.md). Wire shapes only; no behaviour."""

from farm.models.backends import BackendInfo
from farm.models.requests import AddLLMServerRequest, CancelRequest, ProcessRequest, SamplingParams
from farm.models.results import (
    STAGES,
    TERMINAL_STATES,
    JobResult,
    JobState,
    StageError,
    Timings,
    Trace,
    Trajectory,
)
from farm.models.tasks import (
    AgentSpec,
    BuilderSpec,
    EvaluatorSpec,
    RuntimeSpec,
    SessionStatus,
    SubmitResponse,
    TaskRequest,
    TaskStatus,
)

__all__ = [
    "STAGES",
    "TERMINAL_STATES",
    "AddLLMServerRequest",
    "AgentSpec",
    "BackendInfo",
    "BuilderSpec",
    "CancelRequest",
    "EvaluatorSpec",
    "JobResult",
    "JobState",
    "ProcessRequest",
    "RuntimeSpec",
    "SamplingParams",
    "SessionStatus",
    "StageError",
    "SubmitResponse",
    "TaskRequest",
    "TaskStatus",
    "Timings",
    "Trace",
    "Trajectory",
]
