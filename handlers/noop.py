"""`noop`: does nothing in each stage and scores 1. For smoke tests, capacity checks and for
measuring the farm's own overhead (bench/overhead.py)."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from handlers.base import AgentHandler, EvalOutput, HandlerInstance, RunOutput
from handlers.context import JobContext
from handlers.registry import register


class NoopInstance(HandlerInstance):
    reward: float = Field(1.0, description="The reward the job reports.")


@register
class NoopHandler(AgentHandler):
    name = "noop"
    instance_model = NoopInstance

    def init(self, ctx: JobContext) -> dict[str, Any]:
        return {}

    def run(self, ctx: JobContext, state: dict[str, Any]) -> RunOutput:
        ctx.check()
        return RunOutput(finish_reason="noop")

    def eval(self, ctx: JobContext, state: dict[str, Any], run: RunOutput) -> EvalOutput:
        return EvalOutput(reward=ctx.instance.reward)  # type: ignore[attr-defined]
