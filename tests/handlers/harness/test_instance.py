"""The `harness` instance and the handler's pure decisions: what to run, for how long, how it ended."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from containers.results import ExecResult
from farm.errors import JobCancelled, JobDeadlineExceeded
from farm.handler.registry import get_handler
from handlers.harness.execution import Interrupted
from handlers.harness.handler import (
    RESERVE_FRACTION,
    RESERVE_MAX_S,
    RESERVE_MIN_S,
    HarnessHandler,
    harness_budget,
)
from tests.handlers.harness.test_evaluation import context


def validate(**fields: Any) -> Any:
    return get_handler("harness").validate(
        {"handler": "harness", "instruction": "go", "harness": "pi", **fields}
    )


def test_registered_and_minimal_instance() -> None:
    inst = validate()
    assert isinstance(get_handler("harness"), HarnessHandler)
    assert inst.home == "/tmp/farm-harness/home" and inst.prepare == [] and inst.evaluator is None


@pytest.mark.parametrize(
    ("fields", "where"),
    [
        ({"instruction": ""}, "instruction"),
        ({"harness": "aider"}, "harness"),
        ({"timeout_s": 0}, "timeout_s"),
        ({"prepare": ["ok", {"nope": 1}]}, "prepare"),
        ({"evaluator": {"strategy": "nope"}}, "evaluator"),
        ({"home": "relative"}, "home"),
        ({"harness_options": {"api": "smoke-signals"}}, "harness_options"),
    ],
)
def test_validation_errors_name_the_field(fields: dict[str, Any], where: str) -> None:
    with pytest.raises(ValidationError) as caught:
        validate(**fields)
    assert where in str(caught.value)


def test_command_model_and_builder_come_from_the_task_or_the_instance() -> None:
    handler = HarnessHandler()
    ctx = context({"harness": "pi"}, agent={"harness": "pi", "command": "/opt/pi", "model_name": "m1"})
    assert handler.command(ctx, ctx.instance) == "/opt/pi"  # type: ignore[arg-type]
    assert handler.model_name(ctx, ctx.instance) == "m1"  # type: ignore[arg-type]
    assert handler.builder(ctx, ctx.instance) == ("per_request", {})  # type: ignore[arg-type]
    own = context({"harness": "pi", "command": "/mine", "model_name": "m2", "builder": "prefix_merging"})
    assert handler.command(own, own.instance) == "/mine"  # type: ignore[arg-type]
    assert handler.model_name(own, own.instance) == "m2"  # type: ignore[arg-type]
    assert handler.builder(own, own.instance)[0] == "prefix_merging"  # type: ignore[arg-type]
    task_wins = context({"harness": "pi", "builder": "prefix_merging"}, builder={"strategy": "per_request"})
    assert handler.builder(task_wins, task_wins.instance)[0] == "per_request"  # type: ignore[arg-type]
    default = context({"harness": "claude_code"})
    assert handler.model_name(default, default.instance) == "claude-sonnet-4-5"  # type: ignore[arg-type]


def test_job_level_problems_name_their_field() -> None:
    handler = HarnessHandler()
    with pytest.raises(ValueError, match="command"):
        handler.validate_job(context({"harness": "shell"}))
    with pytest.raises(ValueError, match=r"builder\.strategy"):
        handler.validate_job(context(builder={"strategy": "zip"}, agent={"command": "x"}))
    with pytest.raises(ValueError, match=r"runtime\.prepare\[0\]"):
        handler.validate_job(context(runtime={"prepare": [{"write": 3}]}, agent={"command": "x"}))
    with pytest.raises(ValueError, match=r"evaluator\.config\.command"):
        handler.validate_job(context(evaluator={"strategy": "test_on_output"}, agent={"command": "x"}))


def test_session_metadata_never_steers_the_gateway_from_job_metadata() -> None:
    ctx = context(
        agent={"command": "x"},
        metadata={
            "policy_version": 3,
            "model": "pinned?",
            "sampling_params": {"temperature": 9},
            "traceparent": "00-" + "1" * 32 + "-" + "2" * 16 + "-01",  # not the job's own trace
        },
    )
    meta = HarnessHandler.session_metadata(ctx, ctx.instance)  # type: ignore[arg-type]
    assert meta["policy_version"] == 3 and meta["job_id"] == "j1" and meta["harness"] == "shell"
    assert "model" not in meta and "traceparent" not in meta  # tracing off here: no span to hand over
    assert meta["sampling_params"]["temperature"] == 1.0  # the job's own sampling parameters


@given(remaining=st.floats(0, 10_000), cap=st.one_of(st.none(), st.floats(0.1, 10_000)))
def test_budget_leaves_a_reserve(remaining: float, cap: float | None) -> None:
    budget, limit = harness_budget(remaining, cap)
    reserve = min(RESERVE_MAX_S, max(RESERVE_MIN_S, remaining * RESERVE_FRACTION))
    if limit == "harness":
        assert cap is not None and budget == cap and cap < remaining - reserve
    else:
        assert budget == remaining - reserve and (cap is None or cap >= budget)


def result(**fields: Any) -> ExecResult:
    return ExecResult(**({"stdout": "", "stderr": "", "exit_code": 0, "duration_s": 1.0} | fields))


@pytest.mark.parametrize(
    ("outcome", "limit", "expected"),
    [
        (result(), "job", ("completed", "harness_exited")),
        (result(exit_code=3), "job", ("completed", "harness_failed")),
        (result(exit_code=-9, timed_out=True), "job", ("timeout", "deadline")),
        (result(exit_code=-9, timed_out=True), "harness", ("timeout", "harness_timeout")),
        (Interrupted(JobCancelled("x"), None), "job", ("cancelled", "cancelled")),
        (Interrupted(JobDeadlineExceeded("x"), result()), "job", ("timeout", "deadline")),
        (None, "job", ("timeout", "deadline")),
    ],
)
def test_outcomes(outcome: Any, limit: str, expected: tuple[str, str]) -> None:
    assert HarnessHandler.outcome(outcome, limit) == expected
