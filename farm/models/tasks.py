"""The task API (POLAR-compatible): a task expands into `num_samples` sessions, each one job."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from farm.models.requests import SamplingParams, check_min_policy_version, parser_metadata
from farm.models.results import JobResult, JobState


class RuntimeSpec(BaseModel):
    model_config = ConfigDict(extra="allow")

    backend: Literal["local", "apptainer", "docker"] = "local"
    image: str | None = None
    workdir: str | None = None
    network: bool = False
    prepare: list[dict[str, Any] | str] = Field(default_factory=list)


HarnessName = Literal["shell", "claude_code", "codex", "qwen_code", "gemini_cli", "opencode", "pi"]


class AgentSpec(BaseModel):
    model_config = ConfigDict(extra="allow")

    handler: str | None = None
    harness: HarnessName | None = None
    command: str | None = None
    model_name: str | None = None

    @model_validator(mode="after")
    def _one_kind(self) -> AgentSpec:
        if self.handler and self.harness:
            raise ValueError("give either agent.handler or agent.harness, not both")
        return self


class BuilderSpec(BaseModel):
    strategy: Literal["per_request", "prefix_merging"] = "per_request"
    config: dict[str, Any] = Field(default_factory=dict)


class EvaluatorSpec(BaseModel):
    strategy: str | None = None
    config: dict[str, Any] = Field(default_factory=dict)


class TaskRequest(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    task_id: str = Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9._:@-]+$")
    instruction: str | None = None
    instance: dict[str, Any] | None = None
    num_samples: int = Field(1, ge=1, le=1024)
    timeout_seconds: float = Field(600.0, gt=0)
    runtime: RuntimeSpec = Field(default_factory=RuntimeSpec)
    agent: AgentSpec = Field(default_factory=AgentSpec)
    builder: BuilderSpec = Field(default_factory=BuilderSpec)
    evaluator: EvaluatorSpec = Field(default_factory=EvaluatorSpec)
    sampling_params: dict[str, Any] = Field(default_factory=dict)
    callback_url: str | None = Field(None, pattern=r"^https?://")
    metadata: dict[str, Any] = Field(default_factory=dict)
    priority: int = Field(0, ge=0, le=9)
    """0 (normal) to 9 (most urgent): init takes more urgent sessions first."""
    min_usable: int | None = Field(None, ge=1, le=1024)
    """Group: the task is delivered once this many sessions ended usable (`done` with a reward); None:
    `num_samples` when `deadline_s` is set (docs/CONTRACT.md, "Groups with a deadline")."""
    deadline_s: float | None = Field(None, gt=0, le=86400)
    """Group: seconds after submission at which the task is delivered with the usable sessions it has."""
    stragglers: Literal["cancel", "finish"] = "cancel"
    """Sessions still running when the group is delivered: cancelled, or left to finish (not delivered)."""
    infra_reruns: int = Field(0, ge=0, le=8)
    """Times one session that ended with an infrastructure failure (farm.models.failures) is re-run, as a
    new session of the same sample index, before the group is delivered (0: never)."""

    @field_validator("sampling_params")
    @classmethod
    def _sampling_params(cls, value: dict[str, Any]) -> dict[str, Any]:
        """Checked at the door as each session will check it (a 422 naming the key), not after the task
        is claimed: an unknown key once answered 500 and left the task claimed with no session."""
        try:
            SamplingParams.model_validate(value)
        except ValidationError as exc:
            raise ValueError("; ".join(_problem(e) for e in exc.errors())) from None
        return value

    @field_validator("metadata")
    @classmethod
    def _parsers(cls, value: dict[str, Any]) -> dict[str, Any]:
        """A task pins (or requires) its sessions' tool-call parser as a job does (requests.py)."""
        return parser_metadata(value)

    @model_validator(mode="after")
    def _has_work(self) -> TaskRequest:
        if self.instruction is None and self.instance is None:
            raise ValueError("give `instruction` or `instance`")
        return self

    @field_validator("min_usable")
    @classmethod
    def _min_usable(cls, value: int | None, info: ValidationInfo) -> int | None:
        samples = info.data.get("num_samples")
        if value is not None and isinstance(samples, int) and value > samples:
            raise ValueError(f"min_usable ({value}) is more than num_samples ({samples})")
        return value

    @field_validator("metadata")
    @classmethod
    def _min_policy_version(cls, value: dict[str, Any]) -> dict[str, Any]:
        check_min_policy_version(value)
        return value

    @property
    def is_group(self) -> bool:
        """The task asked for group delivery (a deadline, a usable count or infrastructure re-runs)."""
        return self.min_usable is not None or self.deadline_s is not None or self.infra_reruns > 0

    @property
    def usable_target(self) -> int:
        return self.min_usable if self.min_usable is not None else self.num_samples


def _problem(error: Any) -> str:
    """One of SamplingParams' errors, named under sampling_params (its key checks name themselves)."""
    message = str(error["msg"]).removeprefix("Value error, ")
    where = ".".join(map(str, error["loc"]))
    return f"sampling_params.{where}: {message}" if where else message


class SubmitResponse(BaseModel):
    task_id: str
    session_ids: list[str]


class SessionStatus(BaseModel):
    session_id: str
    state: JobState
    result: JobResult | None = None
    sample_index: int | None = None
    """The sample this session runs (a re-run keeps the index of the session it replaces)."""


class Rerun(BaseModel):
    """One session re-run after an infrastructure failure."""

    sample_index: int
    session_id: str
    """The new session."""
    replaced: str
    """The session that failed."""
    reason: str
    """Its failure class (`error.type`, one of farm.models.failures.INFRASTRUCTURE_FAILURES)."""


DeliveryReason = Literal["complete", "min_usable", "deadline"]


class GroupStatus(BaseModel):
    """The group view of a task that set `min_usable`, `deadline_s` or `infra_reruns`."""

    min_usable: int
    deadline_at: float | None = None
    """Unix time of the deadline (None: no deadline)."""
    usable: int
    """Sessions (current ones, after re-runs) that ended `done` with a reward."""
    delivered: bool
    delivered_reason: DeliveryReason | None = None
    """complete: every session ended; min_usable: enough were usable; deadline: the deadline passed."""
    delivered_at: float | None = None
    usable_session_ids: list[str] = Field(default_factory=list)
    """At delivery: the sessions the group is made of (a straggler that finishes later is not added)."""
    stragglers: list[str] = Field(default_factory=list)
    """Sessions not terminal at delivery; `cancelled` or left to finish as `straggler_policy` says."""
    straggler_policy: Literal["cancel", "finish"] = "cancel"
    reruns: list[Rerun] = Field(default_factory=list)


class TaskStatus(BaseModel):
    task_id: str
    state: str
    """submitting until every session exists (a submission that died part-way stays so until the task
    is submitted again), then running while any session is not terminal, then completed."""
    sessions: list[SessionStatus]
    group: GroupStatus | None = None
    """Only for a task that asked for group delivery (TaskRequest.is_group)."""
