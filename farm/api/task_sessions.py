"""A task's sessions: the handler instance they run, checked at the door, and each session's job spec."""

from __future__ import annotations

from typing import Any

from fastapi.exceptions import RequestValidationError

from farm.api.submit import validate_instance
from farm.handler.registry import UnknownHandler, get_handler
from farm.jobs.spec import JobSpec
from farm.models.requests import SamplingParams
from farm.models.tasks import TaskRequest
from farm.models.unknown_fields import declared_names


def task_instance(body: TaskRequest) -> dict[str, Any]:
    """The handler instance a task's sessions run, from `instance`, `instruction` and `agent`."""
    if body.agent.harness is not None:
        instance = dict(body.instance or {})
        instance.setdefault("handler", "harness")
        if body.instruction is not None:
            instance.setdefault("instruction", body.instruction)
        instance.setdefault("harness", body.agent.harness)
        for name in ("command", "model_name"):
            if getattr(body.agent, name) is not None:
                instance.setdefault(name, getattr(body.agent, name))
        return instance
    instance = dict(body.instance or {})
    if body.agent.handler is not None:
        instance["handler"] = body.agent.handler
    if body.instruction is not None and _reads_instruction(instance.get("handler")):
        instance.setdefault("instruction", body.instruction)
    return instance


def _reads_instruction(name: Any) -> bool:
    """Whether the handler's instances take `instruction` (an unknown one is judged by validation later);
    a handler whose instances do not (noop, math) is not handed a field it would refuse."""
    try:
        model = get_handler(name).instance_model if isinstance(name, str) else None
    except UnknownHandler:
        return True
    return (
        model is None or "instruction" in declared_names(model) or model.model_config.get("extra") == "allow"
    )


def validate_harness_task(body: TaskRequest, instance: dict[str, Any]) -> None:
    """The task-level parts a harness job reads at init (runtime.prepare, evaluator, the shell command)
    are checked now, so a mistake is a 422 naming the task's field instead of a failed job later."""
    if instance.get("harness") == "shell" and not instance.get("command"):
        raise RequestValidationError(
            [
                {
                    "type": "missing",
                    "loc": ("body", "agent", "command"),
                    "msg": "the shell harness needs agent.command (or instance.command)",
                    "input": None,
                }
            ]
        )
    probe = {**instance, "prepare": body.runtime.prepare}
    if body.evaluator.strategy:
        probe["evaluator"] = body.evaluator.model_dump()
    where = {"prepare": ("body", "runtime", "prepare"), "evaluator": ("body", "evaluator")}
    try:
        validate_instance(probe, loc=("body", "instance"))
    except RequestValidationError as exc:
        errors = []
        for err in exc.errors():
            field = err["loc"][2] if len(err["loc"]) > 2 else None
            if field in where:
                err = {**err, "loc": (*where[field], *err["loc"][3:])}
            errors.append(err)
        raise RequestValidationError(errors) from None


def checked(body: TaskRequest) -> tuple[dict[str, Any], str]:
    """The sessions' handler instance and handler name; 422 naming the task's field when invalid."""
    instance = task_instance(body)
    loc = ("body", "agent", "harness") if body.agent.harness else ("body", "instance")
    try:
        handler = validate_instance(instance, loc=("body", "instance"))
    except RequestValidationError as exc:
        if body.agent.harness and instance.get("handler") == "harness":
            raise RequestValidationError(
                [{**e, "loc": loc} if e["loc"][-1] == "handler" else e for e in exc.errors()]
            ) from None
        raise
    if body.agent.harness and instance.get("handler") == "harness":
        validate_harness_task(body, instance)
    return instance, handler


def session_spec(
    body: TaskRequest,
    instance: dict[str, Any],
    handler: str,
    index: int,
    job_id: str,
    extra_metadata: dict[str, Any] | None = None,
) -> JobSpec:
    """The job of the task's session `index` (a re-run is another job of the same index)."""
    metadata = {"group_id": body.task_id, **body.metadata, "task_id": body.task_id, "sample_index": index}
    return JobSpec(
        job_id=job_id,
        handler=handler,
        instance=instance,
        sampling_params=SamplingParams.model_validate(body.sampling_params),
        timeout_s=body.timeout_seconds,
        metadata={**metadata, **(extra_metadata or {})},
        task_id=body.task_id,
        sample_index=index,
        runtime=body.runtime.model_dump(),
        agent=body.agent.model_dump(),
        builder=body.builder.model_dump(),
        evaluator=body.evaluator.model_dump(),
        callback_url=body.callback_url,
        priority=body.priority,
    )
