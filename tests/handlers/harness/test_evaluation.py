"""The evaluator registry: choice and config validation, scoring from run artifacts, the patch wrapper."""

from __future__ import annotations

import sys
from typing import Any

import pytest
from pydantic import BaseModel

from farm.handler.context import JobContext
from farm.handler.protocol import RunOutput
from farm.handler.standalone import job_context
from farm.jobs.spec import JobSpec
from handlers.harness.evaluators import (
    EvaluatorUnavailable,
    NoConfig,
    OutputTestConfig,
    OutputTestEvaluator,
    PatchEvaluator,
    SessionCompleted,
    evaluator_names,
    resolve,
)
from handlers.harness.instance import HarnessInstance


def context(instance: dict[str, Any] | None = None, **spec: Any) -> JobContext:
    raw = {"handler": "harness", "instruction": "do", "harness": "shell", **(instance or {})}
    job = JobSpec(job_id="j1", handler="harness", instance=raw, timeout_s=60, **spec)
    return job_context(job, HarnessInstance.model_validate(raw), stage="eval")


def run_with(**artifacts: Any) -> RunOutput:
    return RunOutput(artifacts=artifacts)


def test_names() -> None:
    assert evaluator_names() == ["patch", "session_completed", "test_on_output"]


def test_task_choice_wins_then_instance_then_default() -> None:
    task = {"strategy": "test_on_output", "config": {"command": "pytest -q"}}
    instance = {"strategy": "patch"}
    evaluator, config = resolve(task, instance)
    assert isinstance(evaluator, OutputTestEvaluator) and isinstance(config, OutputTestConfig)
    assert config.command == "pytest -q" and config.fresh is False
    assert isinstance(resolve({"strategy": None, "config": {}}, instance)[0], PatchEvaluator)
    assert isinstance(resolve({}, None)[0], SessionCompleted)


@pytest.mark.parametrize(
    ("choice", "message"),
    [
        ({"strategy": "vibes"}, "evaluator.strategy: unknown evaluator 'vibes'"),
        ({"strategy": "test_on_output"}, "evaluator.config.command"),
        (
            {"strategy": "test_on_output", "config": {"command": "x", "fresh": "maybe"}},
            "evaluator.config.fresh",
        ),
        (
            {"strategy": "test_on_output", "config": {"command": "x", "prepare": [{"bad": 1}]}},
            r"prepare\[0\]",
        ),
        ({"strategy": "session_completed", "config": {"extra": 1}}, "evaluator.config.extra"),
        ({"strategy": "patch", "config": {"timeout_s": 0}}, "evaluator.config.timeout_s"),
    ],
)
def test_bad_choices_name_the_field(choice: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        resolve(choice, None)


@pytest.mark.parametrize(
    ("exit_code", "calls", "reward"), [(0, 3, 1.0), (0, 0, 0.0), (1, 3, 0.0), (None, 2, 0.0)]
)
def test_session_completed(exit_code: int | None, calls: int, reward: float) -> None:
    ctx = context()
    out = SessionCompleted().score(ctx, run_with(exit_code=exit_code, completion_count=calls), NoConfig())
    assert out.reward == reward and out.metadata["session_completed"] is (reward == 1.0)


def test_test_on_output_scores_the_recorded_result() -> None:
    ctx, evaluator = context(), OutputTestEvaluator()
    config = evaluator.parse_config({"command": "pytest"})
    assert evaluator.score(ctx, run_with(test={"passed": True, "exit_code": 0}), config).reward == 1.0
    assert evaluator.score(ctx, run_with(test={"passed": False, "exit_code": 1}), config).reward == 0.0
    missing = evaluator.score(ctx, run_with(), config)
    assert missing.reward == 0.0 and missing.metadata["test_missing"] is True
    with pytest.raises(EvaluatorUnavailable, match="could not run the test: ExecServerError"):
        evaluator.score(ctx, run_with(test={"passed": False, "error": "ExecServerError: gone"}), config)


def test_fresh_steps_only_when_fresh() -> None:
    evaluator = OutputTestEvaluator()
    assert evaluator.fresh_steps(evaluator.parse_config({"command": "x"})) is None
    steps = evaluator.fresh_steps(evaluator.parse_config({"command": "x", "fresh": True, "prepare": ["ls"]}))
    assert steps is not None and len(steps) == 1


def test_patch_wrapper_reports_a_missing_swe_evaluator(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "handlers.swe.evaluation", None)  # makes the import fail
    with pytest.raises(EvaluatorUnavailable, match=r"handlers\.swe\.evaluation\.evaluate_patch"):
        PatchEvaluator().score(context(), run_with(patch="diff"), PatchEvaluator().parse_config({}))


def test_patch_wrapper_passes_instance_patch_runtime_and_timeout(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: dict[str, Any] = {}

    class Verdict(BaseModel):
        reward: float
        applied: bool
        fail_to_pass: dict[str, bool]
        pass_to_pass: dict[str, bool]
        log: str

    def evaluate_patch(
        instance: Any, patch: str, *, runtime: Any = None, timeout_s: float = 300, check: Any = None
    ) -> Verdict:
        seen.update(instance=instance, patch=patch, runtime=runtime, timeout_s=timeout_s, check=check)
        return Verdict(reward=1.0, applied=True, fail_to_pass={"t": True}, pass_to_pass={}, log="x" * 10_000)

    monkeypatch.setattr(PatchEvaluator, "evaluate_patch", staticmethod(lambda: evaluate_patch))
    monkeypatch.setattr(PatchEvaluator, "swe_task", staticmethod(lambda instance: instance))
    ctx = context({"instance_id": "demo-1"}, runtime={"backend": "local", "prepare": []})
    evaluator = PatchEvaluator()
    out = evaluator.score(ctx, run_with(patch="the patch"), evaluator.parse_config({"timeout_s": 42}))
    assert out.reward == 1.0 and out.metadata["applied"] is True
    assert out.metadata["fail_to_pass"] == {"t": True}
    assert len(out.artifacts["eval_log"]) < 5000
    assert seen["patch"] == "the patch" and seen["timeout_s"] == 42
    assert seen["runtime"] == {"backend": "local", "prepare": []}
    assert seen["instance"]["instance_id"] == "demo-1"
    assert seen["check"] == ctx.check
    default = evaluator.score(
        context({"eval_timeout_s": 77}), run_with(patch="p"), evaluator.parse_config({})
    )
    assert default.reward == 1.0 and seen["timeout_s"] == 77
