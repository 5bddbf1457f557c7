"""Why a trajectory ended: one reason per job, from a closed set, on the result and every trace.

The reason is derived from what the job ended with (its state, error class, the handler's finish reason
and the evaluation's metadata) when the result is recorded (farm/jobs/ops.py), so every result carries
exactly one, whichever path ended the job: the agent loop, a harness, the lifecycle (cancel, budget,
lost workers) or an evaluator. Trainers mask or penalise by it (farm.adapters.TerminationRules).
"""

from __future__ import annotations

from enum import StrEnum

from farm.models.failures import INFRASTRUCTURE_FAILURES
from farm.models.results import JobResult, JobState


class TerminationReason(StrEnum):
    answer = "answer"
    """The policy ended the episode itself: a reply without a tool call, the finish tool, or a harness
    that exited 0."""
    completed = "completed"
    """The run ended on its own with no agent-level reason (a handler without an agent loop: noop)."""
    max_turns = "max_turns"
    """The episode used its `max_turns` policy calls."""
    generation_limit = "generation_limit"
    """Sampled tokens ran out: a turn cut at `sampling_params.max_tokens` with no call to run, or the
    trajectory's `max_generated_tokens` spent."""
    context_limit = "context_limit"
    """The conversation filled the context window (`max_context_tokens`, or the backend refused it)."""
    oversized_tool_result = "oversized_tool_result"
    """A tool result longer than the job's `max_tool_result_chars`; the trace ends at the call."""
    unparsed_tool_calls = "unparsed_tool_calls"
    """Every turn held a tool call the selected parser could not read."""
    agent_failed = "agent_failed"
    """A harness (agent CLI) exited non-zero."""
    timeout = "timeout"
    """The job's budget (`timeout_s`), or a harness's own `timeout_s`, ran out."""
    cancelled = "cancelled"
    """Cancelled by a caller (`/cancel`, `/stop`, a task's cancel)."""
    stale_policy = "stale_policy"
    """The backend moved more than `max_policy_lag` versions past the rollout's oldest turn."""
    sandbox_lost = "sandbox_lost"
    """The sandbox or its execution server was lost (`metadata.sandbox_lost` on a done job, or a failed
    job's `ExecServerError`)."""
    sandbox_limit = "sandbox_limit"
    """The rollout hit a sandbox limit (memory, disk, processes: `SandboxLimitExceeded`)."""
    evaluation_refused = "evaluation_refused"
    """The evaluator refused to score what the rollout left (`metadata.evaluation_refused`)."""
    parser_refused = "parser_refused"
    """The job required a tool-call parser (`metadata.required_tool_call_parser`) other than the one that
    would have run."""
    infrastructure_failure = "infrastructure_failure"
    """The farm failed (an `error.type` of farm.models.failures.INFRASTRUCTURE_FAILURES other than a lost
    sandbox): never the policy's doing."""
    error = "error"
    """Any other failure of a stage (a handler's own error)."""


R = TerminationReason

FINISH_REASONS: dict[str, TerminationReason] = {
    "answer": R.answer,
    "finish_tool": R.answer,
    "harness_exited": R.answer,
    "completed": R.completed,
    "noop": R.completed,
    "max_turns": R.max_turns,
    "length": R.generation_limit,
    "generation_limit": R.generation_limit,
    "context_window": R.context_limit,
    "oversized_tool_result": R.oversized_tool_result,
    "tool_call_misses": R.unparsed_tool_calls,
    "harness_failed": R.agent_failed,
    "deadline": R.timeout,
    "harness_timeout": R.timeout,
    "cancelled": R.cancelled,
    "stale_policy": R.stale_policy,
    "sandbox_lost": R.sandbox_lost,
}
"""Handler finish reasons (RunOutput.finish_reason, the agent loop's trace finish_reason) -> reason."""

ERROR_TYPES: dict[str, TerminationReason] = {
    "SandboxLimitExceeded": R.sandbox_limit,
    "ExecServerError": R.sandbox_lost,
    "ToolCallParserRefused": R.parser_refused,
    "EvaluationRefused": R.evaluation_refused,
    "PolicyTooStale": R.stale_policy,
}
"""A failed job's `error.type` -> reason, before the infrastructure classes and `error`."""

KEY = "termination_reason"
"""The metadata key of the result and of every trace."""


def termination_reason(result: JobResult) -> TerminationReason:
    """The one reason `result`'s trajectory ended. A sandbox lost while the rollout ran is why it ended
    even though its evaluation was then refused (the refusal names that loss)."""
    lost = result.metadata.get("sandbox_lost") or result.artifacts.get("sandbox_lost")
    if lost and result.state is JobState.done:
        return R.sandbox_lost
    if result.metadata.get("evaluation_refused"):
        return R.evaluation_refused
    if result.state is JobState.failed:
        kind = result.error.type if result.error else ""
        if kind in ERROR_TYPES:
            return ERROR_TYPES[kind]
        return R.infrastructure_failure if kind in INFRASTRUCTURE_FAILURES else R.error
    if result.state is JobState.timeout:
        return R.timeout
    finish = _finish_reason(result)
    if result.state is JobState.cancelled:
        return R.stale_policy if finish == "stale_policy" else R.cancelled
    if result.state is JobState.done:
        return FINISH_REASONS.get(finish or "completed", R.completed)
    return R.error  # not terminal: never recorded as a result


def _finish_reason(result: JobResult) -> str | None:
    """The handler's finish reason: recorded on a done job's metadata, else on its (agent-loop) traces."""
    recorded = result.metadata.get("finish_reason")
    if isinstance(recorded, str):
        return recorded
    for trace in reversed(result.trajectory.traces):
        if trace.finish_reason in FINISH_REASONS:
            return trace.finish_reason
    return None


def stamp(result: JobResult) -> JobResult:
    """Writes the reason on the result's metadata and on every trace's (in place; returns `result`)."""
    reason = termination_reason(result).value
    result.metadata = {**result.metadata, KEY: reason}
    for trace in result.trajectory.traces:
        trace.metadata = {**trace.metadata, KEY: reason}
    return result


def reason_of(metadata: dict[str, object]) -> TerminationReason | None:
    """The reason a result's or trace's metadata records (None: recorded before reasons existed)."""
    value = metadata.get(KEY)
    try:
        return TerminationReason(value) if isinstance(value, str) else None
    except ValueError:
        return None


def reason_for(result: JobResult) -> TerminationReason:
    """What a result records, else (a result recorded before reasons existed) what it ended with."""
    return reason_of(result.metadata) or termination_reason(result)


__all__ = [
    "ERROR_TYPES",
    "FINISH_REASONS",
    "KEY",
    "TerminationReason",
    "reason_for",
    "reason_of",
    "stamp",
    "termination_reason",
]
