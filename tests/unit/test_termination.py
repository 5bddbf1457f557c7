"""Termination reasons (farm/models/termination.py): one reason from the closed set for every result,
whatever state, error class, finish reason and metadata it ended with; the adapters' mask / penalty by
reason (farm/adapters/termination.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from farm.adapters import TerminationRules, flatten, to_verl
from farm.jobs.ops import _finalize_args
from farm.models import JobResult, JobState, StageError, Trace, Trajectory
from farm.models.failures import INFRASTRUCTURE_FAILURES
from farm.models.termination import (
    ERROR_TYPES,
    FINISH_REASONS,
    KEY,
    TerminationReason,
    reason_for,
    stamp,
    termination_reason,
)
from farm.report.summary import summarize
from farm.ui.trajectory import job_view

R = TerminationReason


def trace(finish: str | None = "answer", n: int = 3) -> Trace:
    return Trace(
        prompt_ids=[1, 2],
        response_ids=list(range(n)),
        loss_mask=[1] * n,
        response_logprobs=[-0.5] * n,
        finish_reason=finish,
    )


def result(
    state: JobState = JobState.done,
    finish: str | None = "answer",
    error: str | None = None,
    reward: float | None = 1.0,
    **metadata: object,
) -> JobResult:
    meta = {**metadata}
    if state is JobState.done and finish is not None:
        meta["finish_reason"] = finish
    return JobResult(
        job_id="j",
        state=state,
        handler="math",
        reward=reward,
        trajectory=Trajectory(traces=[trace(finish)]),
        error=StageError(stage="run", type=error, message="m") if error else None,
        metadata=meta,
    )


@pytest.mark.parametrize(
    ("made", "reason"),
    [
        (result(finish="answer"), R.answer),
        (result(finish="finish_tool"), R.answer),
        (result(finish="harness_exited"), R.answer),
        (result(finish="noop"), R.completed),
        (result(finish="max_turns"), R.max_turns),
        (result(finish="length"), R.generation_limit),
        (result(finish="generation_limit"), R.generation_limit),
        (result(finish="context_window"), R.context_limit),
        (result(finish="oversized_tool_result"), R.oversized_tool_result),
        (result(finish="tool_call_misses"), R.unparsed_tool_calls),
        (result(finish="harness_failed"), R.agent_failed),
        (result(finish="sandbox_lost", sandbox_lost="server gone"), R.sandbox_lost),
        (result(finish="harness_exited", sandbox_lost="killed"), R.sandbox_lost),
        (result(JobState.timeout, "deadline", reward=None), R.timeout),
        (result(JobState.cancelled, "cancelled", reward=None), R.cancelled),
        (result(JobState.cancelled, "stale_policy", reward=None), R.stale_policy),
        (result(JobState.failed, None, "SandboxLimitExceeded", None), R.sandbox_limit),
        (result(JobState.failed, None, "ExecServerError", None), R.sandbox_lost),
        (result(JobState.failed, None, "ToolCallParserRefused", None), R.parser_refused),
        (result(JobState.failed, None, "BackendUnavailable", None), R.infrastructure_failure),
        (result(JobState.failed, None, "StageFailure", None), R.error),
        (result(finish="answer", evaluation_refused="the patch changes conftest.py"), R.evaluation_refused),
        (
            result(JobState.failed, None, "EvaluatorUnavailable", None, evaluation_refused=True),
            R.evaluation_refused,
        ),
    ],
)
def test_each_way_a_job_ends_has_its_reason(made: JobResult, reason: TerminationReason) -> None:
    assert termination_reason(made) is reason


def test_the_tables_name_only_reasons_of_the_closed_set() -> None:
    assert set(FINISH_REASONS.values()) | set(ERROR_TYPES.values()) <= set(TerminationReason)
    # every infrastructure class has a reason (its own, or infrastructure_failure)
    for kind in INFRASTRUCTURE_FAILURES:
        assert termination_reason(result(JobState.failed, None, kind, None)) in (
            R.infrastructure_failure,
            R.sandbox_lost,
        )


@given(
    state=st.sampled_from([s for s in JobState if s.terminal]),
    finish=st.one_of(st.none(), st.sampled_from(sorted(FINISH_REASONS)), st.text(max_size=12)),
    error=st.one_of(
        st.none(), st.sampled_from(sorted(INFRASTRUCTURE_FAILURES | set(ERROR_TYPES))), st.text()
    ),
    refused=st.booleans(),
    lost=st.booleans(),
)
def test_every_result_gets_exactly_one_reason_on_it_and_on_every_trace(
    state: JobState, finish: str | None, error: str | None, refused: bool, lost: bool
) -> None:
    extra: dict[str, object] = {"evaluation_refused": "no"} if refused else {}
    if lost:
        extra["sandbox_lost"] = "gone"
    made = result(state, finish, error or None, None, **extra)
    stamp(made)
    reason = made.metadata[KEY]
    assert reason in {r.value for r in TerminationReason}
    assert all(t.metadata[KEY] == reason for t in made.trajectory.traces)
    assert reason_for(made) is TerminationReason(reason)


def test_a_recorded_result_carries_its_reason_and_a_callers_value_is_not_trusted() -> None:
    made = result(finish="max_turns", termination_reason="answer")  # a caller's metadata key
    _finalize_args(made, 60, "", None)
    assert made.metadata[KEY] == "max_turns"
    assert made.trajectory.traces[0].metadata[KEY] == "max_turns"


def test_old_results_without_a_recorded_reason_are_read_by_what_they_ended_with() -> None:
    assert reason_for(result(JobState.timeout, "deadline", reward=None)) is R.timeout


def stamped(finish: str, reward: float) -> JobResult:
    return stamp(result(finish=finish, reward=reward))


def test_rules_mask_some_reasons_and_penalise_others() -> None:
    results = [stamped("answer", 1.0), stamped("context_window", 0.0), stamped("max_turns", 0.0)]
    rules = TerminationRules(mask_reasons={"context_limit"}, reason_penalty={"max_turns": -0.5})
    samples = flatten(results, rules)
    assert [s.termination_reason for s in samples] == [R.answer, R.context_limit, R.max_turns]
    assert [s.masked for s in samples] == [False, True, False]
    assert [s.reward for s in samples] == [1.0, 0.0, -0.5]
    masked = samples[1].trace
    assert masked.loss_mask == [0, 0, 0] and masked.response_logprobs == [0.0, 0.0, 0.0]
    assert results[1].trajectory.traces[0].loss_mask == [1, 1, 1]  # the caller's result is untouched
    batch = to_verl(results, pad_token_id=0, termination=rules)
    assert batch["response_mask"][1].sum() == 0 and batch["rewards"].tolist() == [1.0, 0.0, -0.5]
    # without rules nothing changes
    assert [s.reward for s in flatten(results)] == [1.0, 0.0, 0.0]
    assert to_verl(results, pad_token_id=0)["response_mask"][1].sum() == 3


def test_rules_refuse_a_reason_outside_the_set() -> None:
    with pytest.raises(ValueError, match="termination reasons are"):
        TerminationRules(mask_reasons={"context_window"})  # a finish reason, not a termination reason
    with pytest.raises(ValueError, match="termination reasons are"):
        TerminationRules(reason_penalty={"bogus": -1.0})


def test_the_report_counts_reasons_and_the_unparsed_rate_per_family_and_parser() -> None:
    parsed = stamped("answer", 1.0)
    parsed.trajectory.traces[0].metadata |= {
        "tool_call_family": "llama",
        "turn_parses": [
            {"turn": 1, "parser": "hermes", "outcome": "unparsed", "would_parse": ["llama3_json"]},
            {"turn": 2, "parser": "hermes", "outcome": "calls"},
            {"turn": 3, "parser": "hermes", "outcome": "no_call"},
        ],
    }
    old = result(JobState.timeout, "deadline", reward=None)  # recorded before reasons existed
    summary = summarize([parsed, stamped("max_turns", 0.0), stamped("max_turns", 0.0), old])
    assert summary.termination_reasons == {"max_turns": 2, "answer": 1, "timeout": 1}
    [row] = summary.tool_call_parsing
    assert (row.family, row.parser, row.outcomes["unparsed"], row.unparsed_rate) == (
        "llama",
        "hermes",
        1,
        0.5,
    )
    assert summary.unparsed_rate == 0.5
    view = job_view(parsed)
    assert view.termination_reason == "answer" and view.traces[0].turn_parses[0]["outcome"] == "unparsed"
