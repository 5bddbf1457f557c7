"""The numbers of a run: outcomes, rewards, stage-time percentiles, throughput, reward per step."""

from __future__ import annotations

from collections import Counter, defaultdict
from statistics import fmean
from typing import Any

import numpy as np
from pydantic import BaseModel

from farm.agent.parse_outcomes import ParseTally
from farm.models import STAGES, JobResult, JobState, Trace
from farm.models.termination import reason_for
from farm.report.runs import Span, spans

TIMED = ("queued", *STAGES)


class Percentiles(BaseModel):
    count: int
    mean: float
    p50: float
    p90: float
    p99: float
    max: float


class StepReward(BaseModel):
    step: int
    jobs: int
    mean_reward: float
    solved: float
    """Fraction of scored jobs with reward > 0."""
    turn_versions: list[int] = []
    """The policy versions that sampled this step's turns (traces' `turn_policy_versions`)."""
    mixed: int = 0
    """Jobs whose turns came from more than one version (partial rollouts across a weight publish)."""


class ParseRow(BaseModel):
    """Assistant turns of one model family and tool-call parser, by parse outcome."""

    family: str
    parser: str
    outcomes: dict[str, int]
    """calls, no_call, unparsed, malformed (farm/agent/parse_outcomes.py)."""
    unparsed_rate: float | None
    """(unparsed + malformed) / turns that attempted a call; None when none did."""


class RunSummary(BaseModel):
    jobs: int
    by_state: dict[str, int]
    by_handler: dict[str, int]
    errors: dict[str, int]
    """`stage/type` of failed jobs."""
    scored: int
    mean_reward: float | None
    solved: float | None
    wall_time_s: float
    rollouts_per_s: float
    """Finished jobs (state done) per second of wall time."""
    stage_times: dict[str, Percentiles]
    traces: int
    trained_tokens: int
    steps: list[StepReward]
    termination_reasons: dict[str, int] = {}
    """Jobs per termination reason (farm/models/termination.py)."""
    tool_call_parsing: list[ParseRow] = []
    """Per model family and parser (agent-loop traces' `turn_parses`)."""
    unparsed_rate: float | None = None
    """Over every family and parser."""


def percentiles(values: list[float]) -> Percentiles:
    array = np.asarray(values, dtype=float)
    if array.size == 0:
        return Percentiles(count=0, mean=0.0, p50=0.0, p90=0.0, p99=0.0, max=0.0)
    p50, p90, p99 = np.percentile(array, [50, 90, 99])
    return Percentiles(
        count=int(array.size),
        mean=float(array.mean()),
        p50=float(p50),
        p90=float(p90),
        p99=float(p99),
        max=float(array.max()),
    )


def step_of(result: JobResult) -> int | None:
    for key in ("step", "policy_version"):
        value = result.metadata.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    return None


def _turn_versions(result: JobResult) -> set[int]:
    found: set[int] = set()
    for trace in result.trajectory.traces:
        for version in trace.metadata.get("turn_policy_versions") or []:
            if isinstance(version, int) and not isinstance(version, bool):
                found.add(version)
    return found


def reward_per_step(results: list[JobResult]) -> list[StepReward]:
    by_step: dict[int, list[float]] = defaultdict(list)
    versions: dict[int, set[int]] = defaultdict(set)
    mixed: dict[int, int] = defaultdict(int)
    for result in results:
        if result.reward is not None:
            step = step_of(result) or 0
            by_step[step].append(result.reward)
            seen = _turn_versions(result)
            versions[step] |= seen
            mixed[step] += len(seen) > 1
    return [
        StepReward(
            step=step,
            jobs=len(rewards),
            mean_reward=fmean(rewards),
            solved=sum(r > 0 for r in rewards) / len(rewards),
            turn_versions=sorted(versions[step]),
            mixed=mixed[step],
        )
        for step, rewards in sorted(by_step.items())
    ]


def group_of(result: JobResult) -> str:
    """The problem a rollout sampled (its GRPO group): metadata problem_id, else group_id, else the job."""
    for key in ("problem_id", "group_id"):
        value = result.metadata.get(key)
        if value is not None:
            return str(value)
    return result.job_id


def reward_by_group(results: list[JobResult]) -> list[tuple[str, int, float]]:
    """(problem, scored samples, mean reward) per problem, best first: which problems the policy
    solves, and which groups carry a learning signal (neither always 0 nor always 1)."""
    by_group: dict[str, list[float]] = defaultdict(list)
    for result in results:
        if result.reward is not None:
            by_group[group_of(result)].append(result.reward)
    rows = [(group, len(rewards), fmean(rewards)) for group, rewards in by_group.items()]
    return sorted(rows, key=lambda row: (-row[2], row[0]))


def summarize(results: list[JobResult], run_spans: list[Span] | None = None) -> RunSummary:
    run_spans = run_spans if run_spans is not None else spans(results)
    rewards = [r.reward for r in results if r.reward is not None]
    wall = max((s.finished for s in run_spans), default=0.0) - min(
        (s.submitted for s in run_spans), default=0.0
    )
    done = sum(r.state is JobState.done for r in results)
    traces = [t for r in results for t in r.trajectory.traces]
    return RunSummary(
        jobs=len(results),
        by_state=dict(Counter(r.state.value for r in results).most_common()),
        by_handler=dict(Counter(r.handler for r in results).most_common()),
        errors=dict(Counter(f"{r.error.stage}/{r.error.type}" for r in results if r.error).most_common()),
        scored=len(rewards),
        mean_reward=fmean(rewards) if rewards else None,
        solved=sum(r > 0 for r in rewards) / len(rewards) if rewards else None,
        wall_time_s=wall,
        rollouts_per_s=done / wall if wall > 0 else 0.0,
        stage_times={
            stage: percentiles([float(getattr(r.timings, stage)) for r in results]) for stage in TIMED
        },
        traces=len(traces),
        trained_tokens=sum(sum(t.loss_mask) for t in traces),
        steps=reward_per_step(results),
        termination_reasons=dict(Counter(reason_for(r).value for r in results).most_common()),
        **_parsing(traces),
    )


def _parsing(traces: list[Trace]) -> dict[str, Any]:
    tally = ParseTally.from_traces(t.metadata for t in traces)
    rows = [ParseRow(family=f, parser=p, outcomes=c, unparsed_rate=r) for f, p, c, r in tally.rows()]
    missed = sum(r.outcomes.get("unparsed", 0) + r.outcomes.get("malformed", 0) for r in rows)
    attempted = missed + sum(r.outcomes.get("calls", 0) for r in rows)
    return {"tool_call_parsing": rows, "unparsed_rate": missed / attempted if attempted else None}


def throughput_series(run_spans: list[Span], bins: int = 30) -> tuple[list[float], list[float]]:
    """(bin centres in s, finished jobs per second in each bin) over the run's wall time."""
    finished = sorted(s.finished for s in run_spans)
    if not finished:
        return [], []
    end = max(finished[-1], 1e-9)
    edges = np.linspace(0.0, end, bins + 1)
    counts, _ = np.histogram(finished, bins=edges)
    width = edges[1] - edges[0]
    centres = (edges[:-1] + edges[1:]) / 2
    return centres.tolist(), (counts / width).tolist()
