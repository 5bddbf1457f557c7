"""The AgentHandler interface (ProRL's handler lifecycle): init → run → eval, per-stage exception
callbacks, and final_result. One handler per task domain, registered by name."""

from __future__ import annotations

import inspect
import warnings
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar, Generic, Literal, cast

from pydantic import BaseModel, ConfigDict, Field, model_validator
from typing_extensions import TypeVar

from farm.handler.context import JobContext
from farm.jobs.record import terminal_result
from farm.models.results import JobResult, JobState, StageError, Trace, Trajectory
from farm.models.unknown_fields import NEAR_MISS, closest, unknown_field_message


class HandlerInstance(BaseModel):
    """Base of every handler's instance model; `handler` is the routing key and is always present.
    A field the model does not declare is refused (a misspelt optional field would otherwise be ignored
    without a word); a handler whose instances carry free-form columns declares `extra="allow"` itself."""

    model_config = ConfigDict(extra="forbid")

    handler: str
    id: str | int | None = None
    """A dataset row's own id (the shipped problem sets carry one), kept with the instance, not read."""

    @model_validator(mode="after")
    def _no_near_misses(self) -> HandlerInstance:
        """Where a handler allows extra fields, one a letter or two from a declared field is a typo."""
        declared = [field.alias or name for name, field in type(self).model_fields.items()]
        for key in self.model_extra or {}:
            meant = closest(key, declared, NEAR_MISS)
            if meant is not None:
                raise ValueError(f"{unknown_field_message(key, [meant])} (a field this handler declares)")
        return self


class RunOutput(BaseModel):
    traces: list[Trace] = Field(default_factory=list)
    artifacts: dict[str, Any] = Field(default_factory=dict)
    finish_reason: str = "completed"
    """Why the episode ended: answer, finish_tool, max_turns, context_window, deadline, cancelled, ..."""
    outcome: Literal["completed", "timeout", "cancelled"] = "completed"
    metadata: dict[str, Any] = Field(default_factory=dict)


class EvalOutput(BaseModel):
    reward: float | None
    artifacts: dict[str, Any] = Field(default_factory=dict)
    metadata: dict[str, Any] = Field(default_factory=dict)


InstanceT = TypeVar("InstanceT", bound=HandlerInstance, default=Any)
"""A handler's instance model: `AgentHandler[MathInstance]` sees `ctx.instance` as a MathInstance in
every stage, no cast; an unparameterized `AgentHandler` (as written before) means Any."""


class AgentHandler(ABC, Generic[InstanceT]):
    name: ClassVar[str]
    instance_model: type[InstanceT] = cast("type[InstanceT]", HandlerInstance)  # cast: a generic default
    """The model of this handler's instances (by default `handler` and `id` only)."""
    node_local: ClassVar[bool] = True
    """init leaves state on its node (a sandbox, a workspace) that only that node's run stage can use."""

    def validate(self, instance: dict[str, Any]) -> InstanceT:
        """Raises pydantic.ValidationError naming the offending field; the API answers 422."""
        return self.instance_model.model_validate(instance)

    @abstractmethod
    def init(self, ctx: JobContext[InstanceT]) -> dict[str, Any]:
        """Prepare the environment; the returned JSON state is handed to run, eval and teardown."""

    @abstractmethod
    def run(self, ctx: JobContext[InstanceT], state: dict[str, Any]) -> RunOutput:
        """Drive the agent. Return partial traces with outcome timeout/cancelled when interrupted."""

    @abstractmethod
    def eval(self, ctx: JobContext[InstanceT], state: dict[str, Any], run: RunOutput) -> EvalOutput:
        """Score the outcome from artifacts (or a fresh environment)."""

    def prewarm(self, stages: set[str]) -> None:
        """Called once in every worker before it takes work, with the stages that worker serves: load
        what the first job would otherwise pay for (a grader's caches, a model, an image)."""

    def teardown(self, ctx: JobContext[InstanceT], state: dict[str, Any]) -> None:
        """Release what init made. Called after run on every outcome, and when init fails."""

    def init_exception(
        self, ctx: JobContext[InstanceT], exc: BaseException, state: dict[str, Any], run: RunOutput | None
    ) -> JobResult:
        """The job's terminal result when its stage raised `exc`. The three exception callbacks share
        this signature (as Celery's on_failure/on_retry/on_success share theirs) and this default:
        `state` is what init made ({} when init itself raised), `run` the run's output (eval only)."""
        return self.failed_result(ctx, ctx.stage, exc, run)

    run_exception = eval_exception = init_exception

    def final_result(self, ctx: JobContext, run: RunOutput, evaluation: EvalOutput) -> JobResult:
        # The request metadata (group_id, policy_version...) is promised on every trace; the trace's own
        # keys win. A job sent through the task API has its task as its group.
        shared = {"group_id": ctx.spec.task_id, **ctx.metadata} if ctx.spec.task_id else dict(ctx.metadata)
        traces = [
            trace.model_copy(update={"reward": evaluation.reward, "metadata": {**shared, **trace.metadata}})
            for trace in run.traces
        ]
        return JobResult(
            job_id=ctx.job_id,
            state=JobState.done,
            handler=self.name,
            reward=evaluation.reward,
            trajectory=Trajectory(traces=traces),
            artifacts={**run.artifacts, **evaluation.artifacts},
            timings=ctx.timings(),
            metadata={**ctx.metadata, "finish_reason": run.finish_reason, **evaluation.metadata},
        )

    def failed_result(
        self, ctx: JobContext, stage: str, exc: BaseException, run: RunOutput | None = None
    ) -> JobResult:
        """`failed`, with the run's traces and artifacts when there is a run (an eval that raised)."""
        kept = (
            {} if run is None else {"trajectory": Trajectory(traces=run.traces), "artifacts": run.artifacts}
        )
        return terminal_result(ctx, JobState.failed, StageError.of(stage, exc), **kept)


ExceptionHook = Callable[[JobContext[Any], BaseException, dict[str, Any], RunOutput | None], JobResult]


def exception_hook(handler: AgentHandler, stage: str) -> ExceptionHook:
    """`handler`'s exception callback of `stage`. One written to the old signatures (init: ctx, exc;
    run: ctx, exc, state; eval: ctx, exc, run) still works, with a DeprecationWarning."""
    hook: Callable[..., JobResult] = getattr(handler, f"{stage}_exception")
    try:
        inspect.signature(hook).bind(None, None, None, None)
    except TypeError:
        name = f"{type(handler).__name__}.{stage}_exception"
        warnings.warn(f"{name} takes the old arguments; take (ctx, exc, state, run)", DeprecationWarning, 2)
        return lambda ctx, exc, state, run: hook(
            ctx, exc, *{"run": (state,), "eval": (run or RunOutput(),)}.get(stage, ())
        )
    return hook
