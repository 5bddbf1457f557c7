"""What a `harness` job takes. The task API fills `instruction` and `harness` from the TaskRequest; the
rest may come from the task (`agent.command`, `agent.model_name`, `builder`, `evaluator`,
`runtime.prepare`) or, for POST /process, from the instance itself."""

from __future__ import annotations

from typing import Any

from pydantic import ConfigDict, Field, field_validator, model_validator

from farm.handler.protocol import HandlerInstance
from farm.models.tasks import HarnessName
from handlers.harness.adapters import get_adapter
from handlers.harness.evaluators import resolve
from handlers.harness.prepare import parse_steps


class HarnessInstance(HandlerInstance):
    # The `patch` evaluator scores a SWE-bench task carried in the instance (instance_id, FAIL_TO_PASS,
    # test_patch, ...: handlers/swe's SweTask): extra fields are accepted, except a near miss of a
    # declared one (HandlerInstance).
    model_config = ConfigDict(extra="allow")

    instruction: str = Field(min_length=1)
    harness: HarnessName
    command: str | None = Field(None, min_length=1)
    """`shell`: the command to run (required, here or as the task's agent.command). Others: the program
    to launch instead of the harness's default executable."""
    model_name: str | None = Field(None, min_length=1)
    """The model name the harness sends (the gateway serves the backend's model whatever the name)."""
    harness_options: dict[str, Any] = Field(default_factory=dict)
    """Adapter options, e.g. pi's `{"api": "anthropic-messages"}`."""
    env: dict[str, str] = Field(default_factory=dict)
    """Extra environment for the harness command."""
    prepare: list[str | dict[str, Any]] = Field(default_factory=list)
    """Steps run after the runtime's own `prepare` (same forms; see handlers/harness/prepare.py)."""
    timeout_s: float | None = Field(None, gt=0)
    """Wall-clock cap for the harness command; the job's remaining budget caps it too."""
    context_window: int | None = Field(None, ge=256)
    """The served model's context length, for harnesses that plan compaction around it."""
    home: str = Field("/tmp/farm-harness/home", pattern=r"^/")
    """HOME of the harness inside the sandbox (its config files go there, not into the workspace)."""
    output_tail_chars: int = Field(8000, ge=0, le=1_000_000)
    builder: str | None = None
    """Trajectory builder when the task names none (POST /process): per_request or prefix_merging."""
    evaluator: dict[str, Any] | None = None
    """`{"strategy", "config"}` when the task names none."""

    @field_validator("prepare")
    @classmethod
    def _steps(cls, value: list[Any]) -> list[Any]:
        parse_steps(value, "prepare")
        return value

    @field_validator("evaluator")
    @classmethod
    def _evaluator(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None:
            resolve({}, value)
        return value

    @model_validator(mode="after")
    def _adapter(self) -> HarnessInstance:
        get_adapter(self.harness, self.harness_options)
        return self
