"""`noop`: does nothing in each stage and scores `reward`. For smoke tests, capacity checks and for
measuring the farm's own overhead (bench/overhead.py). Its knobs let tests hold a job in a stage
(`run_s`) or make a stage raise (`fail_stage`)."""

from __future__ import annotations

import time
from typing import Any, Literal

from pydantic import Field

from containers.errors import SandboxError
from farm.handler.context import JobContext
from farm.handler.protocol import AgentHandler, EvalOutput, HandlerInstance, RunOutput


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
    fail_as: Literal["error", "sandbox_lost"] = "error"
    """How `fail_stage` fails: the handler's own error, or its sandbox lost (containers.errors.SandboxError,
    an infrastructure failure: farm.models.failures)."""
    only_samples: list[int] | None = None
    """The knobs above (init_s, run_s, eval_s, fail_stage) apply only to these sample indexes of a task
    (or `metadata.sample` of a DAPO consumer's jobs), and only to their first attempt (a re-run,
    metadata.attempt > 0, runs plain); None: to every job. One straggler or one lost sandbox in a group
    (tests of groups with a deadline)."""
    generate_tokens: int = Field(0, ge=0, le=4096)
    """When > 0, run first makes one generation of up to this many tokens through the job's
    backend (a probe of the whole path to the inference servers)."""


class StageFailure(RuntimeError):
    pass


class NoopHandler(AgentHandler[NoopInstance]):
    name = "noop"
    instance_model = NoopInstance
    node_local = False

    def _maybe_fail(self, ctx: JobContext[NoopInstance], stage: str) -> None:
        if ctx.instance.fail_stage == stage and _knobs_apply(ctx):
            if ctx.instance.fail_as == "sandbox_lost":
                raise SandboxError(f"{stage}: sandbox lost on purpose")
            raise StageFailure(f"{stage} failed on purpose")

    def init(self, ctx: JobContext[NoopInstance]) -> dict[str, Any]:
        self._maybe_fail(ctx, "init")
        inst = ctx.instance
        _spend(ctx, inst.init_s if _knobs_apply(ctx) else 0.0, inst.busy)
        return {}

    def run(self, ctx: JobContext[NoopInstance], state: dict[str, Any]) -> RunOutput:
        inst = ctx.instance
        self._maybe_fail(ctx, "run")
        artifacts: dict[str, Any] = {}
        if inst.generate_tokens:
            prompt = ctx.tokenizer.apply_chat_template([{"role": "user", "content": "Say hello."}])
            generation = ctx.policy.generate(prompt, {"max_tokens": inst.generate_tokens, "temperature": 1.0})
            artifacts = {"backend": generation.backend, "sampled_tokens": len(generation.token_ids)}
        until = time.monotonic() + (inst.run_s if _knobs_apply(ctx) else 0.0)
        while True:
            ctx.check()
            left = until - time.monotonic()
            if left <= 0:
                return RunOutput(finish_reason="noop", artifacts=artifacts)
            time.sleep(min(0.01, left))

    def eval(self, ctx: JobContext[NoopInstance], state: dict[str, Any], run: RunOutput) -> EvalOutput:
        self._maybe_fail(ctx, "eval")
        inst = ctx.instance
        _spend(ctx, inst.eval_s if _knobs_apply(ctx) else 0.0, inst.busy)
        return EvalOutput(reward=inst.reward)


def _knobs_apply(ctx: JobContext[NoopInstance]) -> bool:
    only = ctx.instance.only_samples
    if only is None:
        return True
    first_attempt = not ctx.metadata.get("attempt")
    index = ctx.metadata.get("sample", ctx.spec.sample_index)  # the DAPO consumer's jobs say `sample`
    return first_attempt and index in only


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
