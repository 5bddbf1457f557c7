"""How a harness rollout is scored, chosen per task by `evaluator.strategy` (config in `evaluator.config`):

- `session_completed`: 1 when the harness exited 0 after at least one model call, else 0.
- `test_on_output`: 1 when `config.command` exits 0 against what the harness left. It runs at the end of
  the run stage (the run sandbox is gone by eval) in the run sandbox, or with `fresh: true` in a fresh
  runtime (the task's runtime and prepare steps, started while the harness runs) that receives the
  workspace's patch; `files` are written first (e.g. hidden tests). Eval scores the recorded result.
- `patch`: the swe handler's evaluator (`handlers.swe.evaluation.evaluate_patch`) on the workspace patch;
  the instance carries the SWE-bench fields.
"""

from __future__ import annotations

import inspect
import logging
import threading
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from containers import ExecServerError, Sandbox, SandboxLimitExceeded, attach
from farm.handler.context import JobContext
from farm.handler.protocol import EvalOutput, RunOutput
from handlers.evaluation_guard import (
    EvaluationRefused,
    EvaluatorUnavailable,
    carry_workspace,
    changed_implicit,
    command_path,
    evaluation_env,
    implicit_files,
    prepare_evaluation,
    refused_patch_paths,
    sandbox_lost_by_rollout,
    workspace_path_dirs,
)
from handlers.harness.prepare import Step, parse_steps, run_steps, sandbox_path, tail
from handlers.harness.sandbox_settings import sandbox_overrides
from handlers.harness.workspace import apply_patch_script
from handlers.sandboxing import start_sandbox

log = logging.getLogger(__name__)
DEFAULT_EVALUATOR = "session_completed"
LOG_TAIL_CHARS = 4000


class NoConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")


@dataclass
class RunFacts:
    """What the run stage hands an evaluator's `collect` once the harness has finished."""

    sandbox: Sandbox
    patch: str | None
    exit_code: int | None
    fresh: FreshRuntime | None = None
    implicit_before: dict[str, str] | None = None
    """The workspace's implicitly loaded files (conftest.py, ...) before the harness ran, read inside."""
    patch_error: str | None = None
    """Why the workspace's patch could not be taken (a git repository the rollout broke)."""


class HarnessEvaluator(ABC):
    name: ClassVar[str]
    config_model: ClassVar[type[BaseModel]] = NoConfig

    def parse_config(self, raw: dict[str, Any] | None) -> BaseModel:
        try:
            return self.config_model.model_validate(raw or {})
        except ValidationError as exc:
            error = exc.errors()[0]
            where = ".".join(str(p) for p in error["loc"])
            suffix = f".{where}" if where else ""
            raise ValueError(f"evaluator.config{suffix}: {error['msg']}") from None

    def fresh_steps(self, config: BaseModel) -> list[Step] | None:
        """Extra prepare steps when a fresh runtime must be readied while the harness runs, else None."""
        return None

    def collect(self, ctx: JobContext, facts: RunFacts, config: BaseModel) -> dict[str, Any]:
        """Run-stage work after the harness finished (completed runs only); returns artifacts."""
        return {}

    @abstractmethod
    def score(self, ctx: JobContext, run: RunOutput, config: BaseModel) -> EvalOutput: ...


class SessionCompleted(HarnessEvaluator):
    name = "session_completed"

    def score(self, ctx: JobContext, run: RunOutput, config: BaseModel) -> EvalOutput:
        exit_code = run.artifacts.get("exit_code")
        calls = int(run.artifacts.get("completion_count") or 0)
        completed = exit_code == 0 and calls >= 1
        return EvalOutput(reward=1.0 if completed else 0.0, metadata={"session_completed": completed})


class OutputTestConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    command: str = Field(min_length=1)
    timeout_s: float = Field(300.0, gt=0)
    cwd: str | None = None
    fresh: bool = False
    """Run in a fresh runtime (prepared while the harness runs) given only the workspace's patch."""
    prepare: list[Any] = Field(default_factory=list)
    """Extra steps for the fresh runtime, after the task's own prepare steps."""
    files: dict[str, str] = Field(default_factory=dict)
    """Written (relative to the workdir) just before the command: hidden tests, fixtures. Written inside the
    sandbox once nothing of the rollout runs, without following links; whatever the rollout left at such a
    name is replaced, and a directory there refuses the evaluation (handlers/evaluation_guard.py)."""

    @field_validator("files")
    @classmethod
    def _relative_names(cls, files: dict[str, str]) -> dict[str, str]:
        for name in files:
            parts = name.split("/")
            if name.startswith("/") or ".." in parts or not name.strip("/.") or "\0" in name:
                raise ValueError(f"{name!r}: a relative path inside the workdir, without '..'")
        return files


class OutputTestEvaluator(HarnessEvaluator):
    name = "test_on_output"
    config_model = OutputTestConfig

    def parse_config(self, raw: dict[str, Any] | None) -> BaseModel:
        config = super().parse_config(raw)
        assert isinstance(config, OutputTestConfig)
        parse_steps(config.prepare, "evaluator.config.prepare")
        return config

    def fresh_steps(self, config: BaseModel) -> list[Step] | None:
        assert isinstance(config, OutputTestConfig)
        return parse_steps(config.prepare, "evaluator.config.prepare") if config.fresh else None

    def collect(self, ctx: JobContext, facts: RunFacts, config: BaseModel) -> dict[str, Any]:
        """Whose state a step failed on decides the class (handlers/evaluation_guard.py): the farm's (a
        fresh runtime before the rollout's work arrives) is an infrastructure failure; the rollout's (its
        own sandbox, or the fresh runtime once its work arrived) is a 0 flagged `evaluation_refused`."""
        assert isinstance(config, OutputTestConfig)
        timeout = min(config.timeout_s, max(ctx.remaining(), 1.0))
        on_farm_state = False
        try:
            facts.sandbox.quiesce()  # nothing the harness left running may touch or race the evaluation
            tampered = self._tampered(facts)
            if tampered:
                why = self._tampering(tampered)
                return {"test": {"passed": False, "exit_code": None, "output": why, "tampered": tampered}}
            cwd = sandbox_path(facts.sandbox.workdir, config.cwd) if config.cwd else None
            if not config.fresh:
                own_dir = prepare_evaluation(facts.sandbox, config.files, cwd)
                return {"test": self._run_test(facts.sandbox, config, timeout, fresh=False, own_dir=own_dir)}
            if facts.fresh is None:
                raise EvaluatorUnavailable("the fresh runtime was never started")
            on_farm_state = True
            sandbox = facts.fresh.wait(timeout=max(ctx.remaining(), 1.0))
            prepare_evaluation(sandbox, {})  # the same step on the farm's own state: must succeed
            on_farm_state = False
            self._transfer(facts, sandbox)
            own_dir = prepare_evaluation(sandbox, config.files, cwd)
            return {"test": self._run_test(sandbox, config, timeout, fresh=True, own_dir=own_dir)}
        except EvaluationRefused as exc:
            if on_farm_state:
                return self._unavailable(ctx, exc, config)
            return {"test": {"passed": False, "exit_code": None, "output": str(exc), "refused": str(exc)}}
        except SandboxLimitExceeded as exc:
            if on_farm_state:
                return self._unavailable(ctx, exc, config)
            why = f"the sandbox exceeded a resource limit during the evaluation: {exc}"
            return {"test": {"passed": False, "exit_code": None, "output": why, "refused": why}}
        except ExecServerError as exc:
            if on_farm_state:  # the farm's own fresh runtime failed before the rollout's work arrived
                return self._unavailable(ctx, exc, config)
            # Lost in the rollout's sandbox, or in the fresh one running the rollout's work: its doing.
            lost = sandbox_lost_by_rollout(exc)
            return {"test": {"passed": False, "exit_code": None, "output": lost, "sandbox_lost": lost}}
        except Exception as exc:  # infrastructure, not the policy's doing: eval fails instead of scoring 0
            return self._unavailable(ctx, exc, config)
        finally:
            if facts.fresh is not None:
                facts.fresh.stop()

    @staticmethod
    def _unavailable(ctx: JobContext, exc: Exception, config: OutputTestConfig) -> dict[str, Any]:
        log.warning("test_on_output could not run for %s: %s", ctx.job_id, exc)
        return {"test": {"passed": False, "error": f"{type(exc).__name__}: {exc}", "fresh": config.fresh}}

    @staticmethod
    def _tampering(tampered: list[str]) -> str:
        """What the changed entries of the implicit-file scan mean, in words."""
        reasons = []
        if "." in tampered:
            reasons.append("the harness made the workspace unreadable (its files could not be checked)")
        if "<depth>" in tampered:
            reasons.append("the harness left a tree too deep to check for files the test would load")
        files = [t for t in tampered if t not in (".", "<depth>")]
        if files:
            reasons.append(f"the harness changed files the test would load implicitly: {', '.join(files)}")
        return "; ".join(reasons)

    @staticmethod
    def _tampered(facts: RunFacts) -> list[str]:
        """Implicitly loaded files the harness added, removed or changed in its workspace (read inside)."""
        if facts.implicit_before is None:
            return []
        return changed_implicit(facts.implicit_before, implicit_files(facts.sandbox))

    @staticmethod
    def _transfer(facts: RunFacts, sandbox: Sandbox) -> None:
        """Bring the harness's work into the fresh runtime: its patch (taken by git inside the stopped
        sandbox), or a copy frozen inside it; EvaluationRefused when its state makes that impossible."""
        if facts.patch is not None:
            if not facts.patch.strip():
                return
            refused = refused_patch_paths(
                facts.patch, workspace_path_dirs(command_path(sandbox), sandbox.workdir)
            )
            if refused:
                raise EvaluationRefused(
                    f"the workspace patch changes files the test would load implicitly: {', '.join(refused)}"
                )
            applied = sandbox.exec(apply_patch_script(), stdin=facts.patch, timeout=120.0)
            if applied.exit_code != 0:
                raise EvaluationRefused(
                    f"the workspace patch does not apply in the fresh runtime:\n{tail(applied.stderr)}"
                )
            return
        if facts.patch_error:
            raise EvaluationRefused(f"the workspace's patch could not be taken: {facts.patch_error}")
        carry_workspace(facts.sandbox, sandbox)  # not a git repository: a frozen copy, made inside

    @staticmethod
    def _run_test(
        sandbox: Sandbox, config: OutputTestConfig, timeout: float, fresh: bool, own_dir: str
    ) -> dict[str, Any]:
        cwd = sandbox_path(sandbox.workdir, config.cwd) if config.cwd else None
        env = evaluation_env(sandbox, rollout_sandbox=not fresh, evaluation_dir=own_dir)
        result = sandbox.exec(config.command, cwd=cwd, timeout=timeout, env=env)
        output = (result.stdout + ("\n" + result.stderr if result.stderr else "")).strip()
        return {
            "passed": result.exit_code == 0 and not result.timed_out,
            "exit_code": result.exit_code,
            "timed_out": result.timed_out,
            "duration_s": round(result.duration_s, 3),
            "output": tail(output, LOG_TAIL_CHARS),
            "fresh": fresh,
        }

    def score(self, ctx: JobContext, run: RunOutput, config: BaseModel) -> EvalOutput:
        test = run.artifacts.get("test")
        if not isinstance(test, dict):
            return EvalOutput(reward=0.0, metadata={"tests_passed": False, "test_missing": True})
        if test.get("error"):
            raise EvaluatorUnavailable(f"test_on_output could not run the test: {test['error']}")
        if test.get("tampered"):
            tampered = {"tests_passed": False, "tampered": test["tampered"]}
            return EvalOutput(reward=0.0, metadata={**tampered, "evaluation_refused": test["output"]})
        if test.get("sandbox_lost"):
            lost = {"tests_passed": False, "sandbox_lost": test["sandbox_lost"]}
            return EvalOutput(reward=0.0, metadata={**lost, "evaluation_refused": test["sandbox_lost"]})
        if test.get("refused"):
            return EvalOutput(
                reward=0.0, metadata={"tests_passed": False, "evaluation_refused": test["refused"]}
            )
        passed = bool(test.get("passed"))
        return EvalOutput(reward=1.0 if passed else 0.0, metadata={"tests_passed": passed})


class PatchConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    timeout_s: float | None = Field(None, gt=0)
    """Default: the instance's `eval_timeout_s`, else 300."""


class PatchEvaluator(HarnessEvaluator):
    """The swe handler's evaluator, imported on first use (that module may not be installed)."""

    name = "patch"
    config_model = PatchConfig

    @staticmethod
    def evaluate_patch() -> Any:
        try:
            from handlers.swe.evaluation import evaluate_patch
        except ImportError as exc:
            raise EvaluatorUnavailable(
                f"the patch evaluator needs handlers.swe.evaluation.evaluate_patch: {exc}"
            ) from exc
        return evaluate_patch

    @staticmethod
    def swe_task(instance: dict[str, Any]) -> Any:
        """The instance as the swe handler's SweTask when that model exists (its errors name fields)."""
        try:
            from handlers.swe.instance import SweTask
        except ImportError:
            return instance
        return SweTask.model_validate(instance)

    def score(self, ctx: JobContext, run: RunOutput, config: BaseModel) -> EvalOutput:
        assert isinstance(config, PatchConfig)
        evaluate_patch = self.evaluate_patch()
        patch = run.artifacts.get("patch") or ""
        options: dict[str, Any] = {
            "runtime": dict(ctx.spec.runtime) or None,
            "timeout_s": config.timeout_s or float(ctx.spec.instance.get("eval_timeout_s") or 300.0),
        }
        if "check" in inspect.signature(evaluate_patch).parameters:
            options["check"] = ctx.check  # lets a cancellation stop the evaluation between its steps
        verdict = evaluate_patch(self.swe_task(ctx.spec.instance), patch, **options)
        return EvalOutput(
            reward=float(verdict.reward),
            artifacts={"eval_log": tail(str(verdict.log or ""), LOG_TAIL_CHARS)},
            metadata={
                "applied": verdict.applied,
                "fail_to_pass": verdict.fail_to_pass,
                "pass_to_pass": verdict.pass_to_pass,
                **(
                    {"evaluation_refused": refused}
                    if (refused := getattr(verdict, "evaluation_refused", None))
                    else {}
                ),
            },
        )


EVALUATORS: dict[str, HarnessEvaluator] = {
    e.name: e for e in (SessionCompleted(), OutputTestEvaluator(), PatchEvaluator())
}


def register_evaluator(evaluator: HarnessEvaluator) -> HarnessEvaluator:
    """Adds (or replaces) an evaluator under its name."""
    EVALUATORS[evaluator.name] = evaluator
    return evaluator


def evaluator_names() -> list[str]:
    return sorted(EVALUATORS)


def get_evaluator(name: str) -> HarnessEvaluator:
    if name not in EVALUATORS:
        raise ValueError(
            f"evaluator.strategy: unknown evaluator {name!r}; evaluators: {', '.join(evaluator_names())}"
        )
    return EVALUATORS[name]


def resolve(
    task_level: dict[str, Any], instance_level: dict[str, Any] | None
) -> tuple[HarnessEvaluator, BaseModel]:
    """The evaluator and its parsed config: the task's `evaluator`, else the instance's, else the default."""
    for choice in (task_level, instance_level or {}):
        if choice.get("strategy"):
            evaluator = get_evaluator(str(choice["strategy"]))
            return evaluator, evaluator.parse_config(choice.get("config"))
    evaluator = get_evaluator(DEFAULT_EVALUATOR)
    return evaluator, evaluator.parse_config(None)


class FreshRuntime:
    """A second sandbox started and prepared in the background while the harness runs."""

    def __init__(self, ctx: JobContext, steps: list[tuple[str, list[Step]]]) -> None:
        self._lock = threading.Lock()
        self._sandbox: Sandbox | None = None
        self._error: BaseException | None = None
        self._stopped = False
        self._thread = threading.Thread(
            target=self._prepare, args=(ctx, steps), name="fresh-runtime", daemon=True
        )
        self._thread.start()

    def _prepare(self, ctx: JobContext, steps: list[tuple[str, list[Step]]]) -> None:
        try:
            sandbox = attach(start_sandbox(ctx, **sandbox_overrides()))
            with self._lock:
                if self._stopped:
                    sandbox.stop()
                    return
                self._sandbox = sandbox
            for field_name, group in steps:
                run_steps(sandbox, group, field_name, sandbox.exec, lambda: None)
        except BaseException as exc:  # reported by wait()
            if not self._stopped:
                log.warning("the fresh runtime could not be prepared: %s", exc)
            self._error = exc

    def wait(self, timeout: float) -> Sandbox:
        self._thread.join(timeout)
        if self._thread.is_alive():
            raise TimeoutError(f"the fresh runtime was not ready within {timeout:.0f}s")
        if self._error is not None:
            raise self._error
        assert self._sandbox is not None
        return self._sandbox

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            sandbox, self._sandbox = self._sandbox, None
        if sandbox is not None:
            try:
                sandbox.stop()
            except Exception:
                log.exception("stopping the fresh runtime failed")
