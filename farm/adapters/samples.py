"""One flat view of trainable sequences, whatever the caller holds: DAPO groups, JobResults or Traces.

A job that ended with an infrastructure failure (farm.models.failures: its sandbox or evaluator lost,
backends unreachable) was never scored: its traces are left out of every adapter's output, never given
a reward of 0; `infrastructure_failures` counts them by class for the trainer's logs."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from farm.adapters.termination import TerminationRules, result_reason, trace_reason
from farm.client.groups import Group
from farm.models import JobResult, JobState, Trace
from farm.models.failures import infrastructure_failure
from farm.models.termination import TerminationReason

Source = Iterable[Group] | Iterable[JobResult] | Iterable[Trace]


@dataclass(frozen=True)
class TrainSample:
    trace: Trace
    reward: float
    """The trace's own reward if it has one (turn-level / discounted), else its trajectory's."""
    group_index: int
    """Samples of one prompt share it (GRPO advantage groups)."""
    group_id: str
    trajectory_index: int
    """Position of the job (trajectory) the trace came from; several traces may share it."""
    job_id: str | None
    state: JobState
    """The job's final state (`done` for bare Traces)."""
    termination_reason: TerminationReason | None = None
    """Why the trajectory ended (farm/models/termination.py; None for a bare Trace that does not say)."""
    masked: bool = False
    """Its loss mask was zeroed by the caller's TerminationRules."""

    @property
    def truncated(self) -> bool:
        return engine_stop_reason(self.trace) == "length"


LENGTH_REASONS = frozenset({"length", "context_window"})
"""Episode ends where the engine (or the context window) cut the sequence rather than a stop token."""


def engine_stop_reason(trace: Trace) -> str:
    """The engine's view of how the trace ended: `length` if its last turn was cut, else `stop`.

    The handler's reasons (`answer`, `finish_tool`, `max_turns`) all end on a sampled stop token;
    trainers that filter overlong samples (DAPO) must only drop the cut ones.
    """
    return "length" if trace.finish_reason in LENGTH_REASONS else "stop"


def flatten(source: Source, termination: TerminationRules | None = None) -> list[TrainSample]:
    """Every trace in order, tagged with its group, trajectory and termination reason, with the
    caller's `termination` rules (mask, penalty by reason) applied. Jobs without traces add nothing."""
    samples = _flatten(source)
    return samples if termination is None else [termination.apply(s) for s in samples]


def _flatten(source: Source) -> list[TrainSample]:
    items = list(source)
    if not items:
        return []
    if isinstance(items[0], Group):
        return _from_groups(items)  # type: ignore[arg-type]
    if isinstance(items[0], JobResult):
        return _from_results(items, {})  # type: ignore[arg-type]
    if isinstance(items[0], Trace):
        return _from_traces(items)  # type: ignore[arg-type]
    raise TypeError(f"expected Groups, JobResults or Traces, got {type(items[0]).__name__}")


def infrastructure_failures(source: Source) -> dict[str, int]:
    """Jobs of `source` left out for an infrastructure failure, per failure class (bare Traces: none)."""
    results: list[JobResult] = []
    for item in source:
        if isinstance(item, Group):
            results += item.results
        elif isinstance(item, JobResult):
            results.append(item)
    return dict(Counter(c for c in map(infrastructure_failure, results) if c is not None))


def _from_groups(groups: list[Group]) -> list[TrainSample]:
    samples: list[TrainSample] = []
    trajectory = 0
    for group_index, group in enumerate(groups):
        for result, reward in zip(group.results, group.rewards, strict=True):
            if infrastructure_failure(result) is not None:
                continue
            reason = result_reason(result)
            for trace in result.trajectory.traces:
                samples.append(
                    TrainSample(
                        trace=trace,
                        reward=trace.reward if trace.reward is not None else reward,
                        group_index=group_index,
                        group_id=group.group_id,
                        trajectory_index=trajectory,
                        job_id=result.job_id,
                        state=result.state,
                        termination_reason=reason,
                    )
                )
            trajectory += 1
    return samples


def _group_key(metadata: dict[str, Any], fallback: str) -> str:
    return str(metadata.get("group_id") or metadata.get("task_id") or fallback)


def _from_results(results: list[JobResult], index: dict[str, int]) -> list[TrainSample]:
    samples: list[TrainSample] = []
    kept = [result for result in results if infrastructure_failure(result) is None]
    for trajectory, result in enumerate(kept):
        group_id = _group_key(result.metadata, result.job_id)
        group_index = index.setdefault(group_id, len(index))
        reason = result_reason(result)
        for trace in result.trajectory.traces:
            reward = trace.reward if trace.reward is not None else result.reward
            samples.append(
                TrainSample(
                    trace=trace,
                    reward=float(reward or 0.0),
                    group_index=group_index,
                    group_id=group_id,
                    trajectory_index=trajectory,
                    job_id=result.job_id,
                    state=result.state,
                    termination_reason=reason,
                )
            )
    return samples


def _from_traces(traces: list[Trace]) -> list[TrainSample]:
    index: dict[str, int] = {}
    jobs: dict[str, int] = {}  # traces of one job are one trajectory
    samples = []
    for position, trace in enumerate(traces):
        group_id = _group_key(trace.metadata, f"trace-{position}")
        job = str(trace.metadata.get("job_id") or f"trace-{position}")
        samples.append(
            TrainSample(
                trace=trace,
                reward=float(trace.reward or 0.0),
                group_index=index.setdefault(group_id, len(index)),
                group_id=group_id,
                trajectory_index=jobs.setdefault(job, len(jobs)),
                job_id=trace.metadata.get("job_id"),
                state=JobState.done,
                termination_reason=trace_reason(trace),
            )
        )
    return samples
