"""`harness`: an unchanged agent harness (shell command, Claude Code, Codex, Qwen Code, Gemini CLI,
opencode, pi) runs in the job's sandbox with its provider base URL pointed at a gateway session; the
session's recorded completions become the trajectory.

init starts the sandbox (network on) and runs the `prepare` steps. run opens a gateway session, writes
the adapter's config files, runs the harness under the job's remaining budget while watching for
cancellation, takes the workspace patch, ends the session and exports its traces with the task's
builder, also on timeout or cancellation. eval scores through the evaluator registry (evaluators.py).
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Any, Literal

from pydantic import BaseModel

from containers import ExecServerError, Sandbox, SandboxLimitExceeded
from containers.results import ExecResult
from farm import tracing
from farm.builders import builder_names
from farm.errors import JobCancelled, LeaseLost, WorkerDraining
from farm.handler.context import JobContext
from farm.handler.protocol import AgentHandler, EvalOutput, RunOutput
from handlers.evaluation_guard import implicit_files, sandbox_lost_by_rollout
from handlers.harness.adapters import HarnessInputs, HarnessPlan, get_adapter
from handlers.harness.evaluators import FreshRuntime, HarnessEvaluator, RunFacts, resolve
from handlers.harness.execution import Interrupted, checked_exec, quietly, run_interruptible
from handlers.harness.gateway_access import session_access
from handlers.harness.instance import HarnessInstance
from handlers.harness.prepare import Step, parse_steps, run_steps, tail, write_file_command
from handlers.harness.sandbox_settings import sandbox_overrides
from handlers.harness.sessions import GatewaySessions
from handlers.harness.workspace import git_base, take_patch
from handlers.sandboxing import open_sandbox, start_sandbox, stop_sandbox

log = logging.getLogger(__name__)
DEFAULT_BUILDER = "per_request"
# Kept back from the harness's time so that the patch, the session export and the test still fit.
RESERVE_FRACTION = 0.1
RESERVE_MIN_S = 2.0
RESERVE_MAX_S = 30.0
HARNESS_OUTPUT_LIMIT = 4 * 1024 * 1024
Outcome = Literal["completed", "timeout", "cancelled"]
"""RunOutput.outcome."""
_NOT_SESSION_METADATA = ("model", "sampling_params", tracing.TRACEPARENT)
"""Gateway session metadata keys that steer the gateway: never copied from the job's own metadata."""


def harness_budget(remaining: float, harness_timeout: float | None) -> tuple[float, str]:
    """(seconds the harness may run, what limits it: `job` or `harness`)."""
    reserve = min(RESERVE_MAX_S, max(RESERVE_MIN_S, remaining * RESERVE_FRACTION))
    budget = remaining - reserve
    if harness_timeout is not None and harness_timeout < budget:
        return harness_timeout, "harness"
    return budget, "job"


class HarnessHandler(AgentHandler[HarnessInstance]):
    name = "harness"
    instance_model = HarnessInstance

    # ---- what the job asks for ------------------------------------------------------------------------

    @staticmethod
    def command(ctx: JobContext, inst: HarnessInstance) -> str | None:
        command = inst.command or ctx.spec.agent.get("command")
        if inst.harness == "shell" and not command:
            raise ValueError("command: the shell harness needs a command (agent.command or instance.command)")
        return command

    @staticmethod
    def model_name(ctx: JobContext, inst: HarnessInstance) -> str:
        adapter = get_adapter(inst.harness, inst.harness_options)
        return inst.model_name or ctx.spec.agent.get("model_name") or adapter.default_model

    @staticmethod
    def builder(ctx: JobContext, inst: HarnessInstance) -> tuple[str, dict[str, Any]]:
        strategy = ctx.spec.builder.get("strategy") or inst.builder or DEFAULT_BUILDER
        if strategy not in builder_names():
            raise ValueError(
                f"builder.strategy: unknown builder {strategy!r}; builders: {', '.join(builder_names())}"
            )
        return strategy, dict(ctx.spec.builder.get("config") or {})

    @staticmethod
    def prepare_steps(ctx: JobContext, inst: HarnessInstance) -> list[tuple[str, list[Step]]]:
        groups = [
            ("runtime.prepare", parse_steps(list(ctx.spec.runtime.get("prepare") or []), "runtime.prepare"))
        ]
        if inst.prepare:
            groups.append(("prepare", parse_steps(inst.prepare, "prepare")))
        return groups

    def validate_job(self, ctx: JobContext[HarnessInstance]) -> HarnessInstance:
        """Everything that can be wrong with the job before a sandbox exists, each naming its field."""
        inst = ctx.instance
        self.command(ctx, inst)
        self.builder(ctx, inst)
        self.prepare_steps(ctx, inst)
        resolve(ctx.spec.evaluator, inst.evaluator)
        return inst

    # ---- stages ---------------------------------------------------------------------------------------

    def init(self, ctx: JobContext[HarnessInstance]) -> dict[str, Any]:
        inst = self.validate_job(ctx)
        state: dict[str, Any] = {"sandbox": start_sandbox(ctx, **sandbox_overrides())}
        try:
            sandbox = open_sandbox(state)
            execute = checked_exec(sandbox, ctx.check)
            for field, steps in self.prepare_steps(ctx, inst):
                run_steps(sandbox, steps, field, execute, ctx.check)
            state["git_base"] = git_base(execute)
        except BaseException:
            stop_sandbox(state)  # init's state never reaches teardown when init raises
            raise
        return state

    def run(self, ctx: JobContext[HarnessInstance], state: dict[str, Any]) -> RunOutput:
        inst = self.validate_job(ctx)
        sandbox = open_sandbox(state)
        evaluator, evaluator_config = resolve(ctx.spec.evaluator, inst.evaluator)
        builder, builder_config = self.builder(ctx, inst)
        adapter = get_adapter(inst.harness, inst.harness_options)
        with GatewaySessions() as gateway:
            session_id, base_url = gateway.create(
                ctx.spec.task_id or ctx.job_id, self.session_metadata(ctx, inst)
            )
            fresh: FreshRuntime | None = None
            access = contextlib.ExitStack()
            try:
                sandbox_url = access.enter_context(session_access(sandbox, base_url))
                plan = adapter.plan(self.harness_inputs(ctx, inst, sandbox.workdir, sandbox_url))
                self.write_files(sandbox, plan, ctx)
                fresh_steps = evaluator.fresh_steps(evaluator_config)
                if fresh_steps is not None:
                    groups = [*self.prepare_steps(ctx, inst), ("evaluator.config.prepare", fresh_steps)]
                    fresh = FreshRuntime(ctx, groups)
                implicit_before = implicit_files(sandbox)  # read inside, before anything of the rollout
                kind, finish_reason, artifacts = self.run_harness(ctx, inst, sandbox, plan, session_id)
                self.after_harness(
                    ctx, state, kind, artifacts, fresh, implicit_before, evaluator, evaluator_config
                )
            except BaseException:
                quietly(lambda: gateway.end(session_id))
                raise
            finally:
                access.close()
                if fresh is not None:
                    fresh.stop()
            artifacts["completion_count"] = gateway.end(session_id)
            traces, failed_calls = gateway.export(session_id, builder, builder_config)
        return RunOutput(
            traces=traces,
            artifacts=artifacts,
            finish_reason=finish_reason,
            outcome=kind,
            metadata={
                "harness": inst.harness,
                "gateway_api": plan.api,
                "gateway_session_id": session_id,
                "builder": builder,
                "completion_count": artifacts["completion_count"],
                "exit_code": artifacts["exit_code"],
                "failed_calls": failed_calls,
            },
        )

    def after_harness(
        self,
        ctx: JobContext,
        state: dict[str, Any],
        kind: str,
        artifacts: dict[str, Any],
        fresh: FreshRuntime | None,
        implicit_before: dict[str, str] | None,
        evaluator: HarnessEvaluator,
        evaluator_config: BaseModel,
    ) -> None:
        """Stops every process of the rollout, then takes its patch and the evaluation's facts into
        `artifacts`: nothing the rollout left runs while they are read."""
        # A new connection: after an interruption the harness's exec may still hold the old one.
        after = open_sandbox(state)
        self.stop_rollout(after, artifacts)  # before the patch or any evaluation step reads it
        if not artifacts.get("sandbox_lost"):
            artifacts.update(self.patch_artifacts(after, state))
        if kind == "completed" and not artifacts.get("sandbox_lost"):
            facts = RunFacts(
                after,
                artifacts.get("patch"),
                artifacts["exit_code"],
                fresh,
                implicit_before,
                artifacts.get("patch_error"),
            )
            artifacts.update(evaluator.collect(ctx, facts, evaluator_config))

    def eval(self, ctx: JobContext[HarnessInstance], state: dict[str, Any], run: RunOutput) -> EvalOutput:
        evaluator, config = resolve(ctx.spec.evaluator, ctx.instance.evaluator)
        if run.artifacts.get("sandbox_lost"):
            lost = {
                "evaluator": evaluator.name,
                "sandbox_lost": run.artifacts["sandbox_lost"],
                "evaluation_refused": run.artifacts["sandbox_lost"],
            }
            return EvalOutput(reward=0.0, metadata=lost)
        evaluation = evaluator.score(ctx, run, config)
        evaluation.metadata = {"evaluator": evaluator.name, **evaluation.metadata}
        return evaluation

    def teardown(self, ctx: JobContext[HarnessInstance], state: dict[str, Any]) -> None:
        stop_sandbox(state)

    # ---- pieces of run --------------------------------------------------------------------------------

    @staticmethod
    def session_metadata(ctx: JobContext, inst: HarnessInstance) -> dict[str, Any]:
        own = {k: v for k, v in ctx.metadata.items() if k not in _NOT_SESSION_METADATA}
        sampling = ctx.spec.sampling_params.model_dump(exclude_none=True)
        metadata = {
            **own,
            "job_id": ctx.job_id,
            "handler": "harness",
            "harness": inst.harness,
            "sampling_params": sampling,
        }
        traceparent = tracing.current_traceparent()  # the run stage's span: the gateway's calls nest under it
        if traceparent is not None:
            metadata[tracing.TRACEPARENT] = traceparent
        return metadata

    def harness_inputs(
        self, ctx: JobContext, inst: HarnessInstance, workspace: str, base_url: str
    ) -> HarnessInputs:
        return HarnessInputs(
            base_url=base_url,
            model=self.model_name(ctx, inst),
            instruction=inst.instruction,
            workspace=workspace,
            home=inst.home,
            command=self.command(ctx, inst),
            context_window=inst.context_window,
            max_output_tokens=ctx.spec.sampling_params.max_tokens,
        )

    def run_harness(
        self, ctx: JobContext, inst: HarnessInstance, sandbox: Sandbox, plan: HarnessPlan, session_id: str
    ) -> tuple[Outcome, str, dict[str, Any]]:
        """(outcome, finish reason, artifacts) of running the harness under what is left of the budget."""
        budget, limit = harness_budget(ctx.remaining(), inst.timeout_s)
        started = time.monotonic()
        outcome: ExecResult | Interrupted | None = None
        if budget > 0:
            try:
                outcome = run_interruptible(
                    sandbox,
                    plan.script(),
                    ctx.check,
                    timeout=budget,
                    cwd=sandbox.workdir,
                    env={**plan.env, **inst.env},
                    output_limit=HARNESS_OUTPUT_LIMIT,
                )
            except SandboxLimitExceeded:
                raise  # a limit the harness hit ends the job as that failure
            except ExecServerError as exc:  # lost while the harness ran there: its doing (evaluation_guard)
                duration = round(time.monotonic() - started, 3)
                lost = {"sandbox_lost": sandbox_lost_by_rollout(exc), "exit_code": None}
                return (
                    "completed",
                    "sandbox_lost",
                    {"harness": inst.harness, **lost, "harness_duration_s": duration},
                )
        duration = time.monotonic() - started
        if isinstance(outcome, Interrupted) and isinstance(outcome.error, LeaseLost | WorkerDraining):
            raise outcome.error  # another attempt (or a restart from init) takes over
        kind, finish_reason = self.outcome(outcome, limit)
        result = outcome.result if isinstance(outcome, Interrupted) else outcome
        artifacts: dict[str, Any] = {
            "harness": inst.harness,
            "gateway_session_id": session_id,
            "exit_code": result.exit_code if result is not None else None,
            "output_tail": tail(result.stdout, inst.output_tail_chars) if result else "",
            "stderr_tail": tail(result.stderr, inst.output_tail_chars) if result else "",
            "harness_duration_s": round(duration, 3),
        }
        return kind, finish_reason, artifacts

    @staticmethod
    def write_files(sandbox: Any, plan: HarnessPlan, ctx: JobContext) -> None:
        for planned in plan.files:
            ctx.check()
            command = write_file_command(planned.path, format(planned.mode, "o"))
            result = sandbox.exec(command, stdin=planned.content, timeout=60.0)
            if result.exit_code != 0:
                raise RuntimeError(
                    f"could not write the harness config {planned.path}: {result.stderr.strip()}"
                )

    @staticmethod
    def outcome(outcome: ExecResult | Interrupted | None, limit: str) -> tuple[Outcome, str]:
        """(RunOutput outcome, finish reason) of the harness command."""
        if outcome is None:
            return "timeout", "deadline"
        if isinstance(outcome, Interrupted):
            return (
                ("cancelled", "cancelled")
                if isinstance(outcome.error, JobCancelled)
                else ("timeout", "deadline")
            )
        if outcome.timed_out:
            return "timeout", "deadline" if limit == "job" else "harness_timeout"
        return "completed", "harness_exited" if outcome.exit_code == 0 else "harness_failed"

    @staticmethod
    def stop_rollout(sandbox: Sandbox, artifacts: dict[str, Any]) -> None:
        """Kill everything the harness left running in its sandbox (issue 34 item 1); a server the rollout
        took down with it is the rollout's doing (evaluation_guard)."""
        try:
            sandbox.quiesce()
        except SandboxLimitExceeded:
            raise  # a limit the harness hit ends the job as that failure
        except ExecServerError as exc:
            artifacts.setdefault("sandbox_lost", sandbox_lost_by_rollout(exc))

    @staticmethod
    def patch_artifacts(sandbox: Any, state: dict[str, Any]) -> dict[str, Any]:
        try:
            patch = take_patch(sandbox.exec, state.get("git_base"))
        except Exception as exc:  # a patch we cannot take must not lose the traces
            log.warning("no patch for sandbox %s: %s", sandbox.id, exc)
            return {"patch_error": str(exc)[:2000]}
        return {} if patch is None else {"patch": patch}
