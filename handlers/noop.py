"""`noop`: does nothing in each stage and scores `reward`. For smoke tests, capacity checks and for
measuring the farm's own overhead (bench/overhead.py). Its knobs let tests hold a job in a stage
(`run_s`) or make a stage raise (`fail_stage`)."""

from __future__ import annotations

import time
from typing import Any, Literal

from pydantic import Field

from farm.handler.context import JobContext
from farm.handler.protocol import AgentHandler, EvalOutput, HandlerInstance, RunOutput
from farm.handler.registry import register


class NoopInstance(HandlerInstance):
    reward: float = 1.0
    run_s: float = Field(0.0, ge=0, le=3600)
    """Seconds to spend in run, checking for cancellation every 10 ms."""
    init_s: float = Field(0.0, ge=0, le=3600)
    eval_s: float = Field(0.0, ge=0, le=3600)
    """Seconds to spend in init and eval: slept, or with `busy` spent computing (as a sandbox start or a
    test run would), so benches can model slow, CPU-bound init and eval stages."""
    busy: bool = False
    fail_stage: Literal["init", "run", "eval"] | None = None
    generate_tokens: int = Field(0, ge=0, le=4096)
    """When > 0, run first makes one generation of up to this many tokens through the job's
    backend (a probe of the whole path to the inference servers)."""


class StageFailure(RuntimeError):
    pass


@register
class NoopHandler(AgentHandler):
    name = "noop"
    instance_model = NoopInstance
    node_local = False

    def _maybe_fail(self, ctx: JobContext, stage: str) -> None:
        if ctx.instance.fail_stage == stage:  # type: ignore[attr-defined]
            raise StageFailure(f"{stage} failed on purpose")

    def init(self, ctx: JobContext) -> dict[str, Any]:
        self._maybe_fail(ctx, "init")
        inst: NoopInstance = ctx.instance  # type: ignore[assignment]
        _spend(ctx, inst.init_s, inst.busy)
        return {}

    def run(self, ctx: JobContext, state: dict[str, Any]) -> RunOutput:
        inst: NoopInstance = ctx.instance  # type: ignore[assignment]
        self._maybe_fail(ctx, "run")
        artifacts: dict[str, Any] = {}
        if inst.generate_tokens:
            prompt = ctx.tokenizer.apply_chat_template([{"role": "user", "content": "Say hello."}])
            generation = ctx.policy.generate(prompt, {"max_tokens": inst.generate_tokens, "temperature": 1.0})
            artifacts = {"backend": generation.backend, "sampled_tokens": len(generation.token_ids)}
        until = time.monotonic() + inst.run_s
        while True:
            ctx.check()
            left = until - time.monotonic()
            if left <= 0:
                return RunOutput(finish_reason="noop", artifacts=artifacts)
            time.sleep(min(0.01, left))

    def eval(self, ctx: JobContext, state: dict[str, Any], run: RunOutput) -> EvalOutput:
        self._maybe_fail(ctx, "eval")
        inst: NoopInstance = ctx.instance  # type: ignore[assignment]
        _spend(ctx, inst.eval_s, inst.busy)
        return EvalOutput(reward=inst.reward)


def _spend(ctx: JobContext, seconds: float, busy: bool) -> None:
    """Spend `seconds` (computing when `busy`, else sleeping), checking for cancellation every 10 ms."""
    until = time.monotonic() + seconds
    while (left := until - time.monotonic()) > 0:
        ctx.check()
        if busy:
            slice_end = time.monotonic() + min(0.01, left)
            while time.monotonic() < slice_end:
                pass
        else:
            time.sleep(min(0.01, left))
