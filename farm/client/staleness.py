"""Off-policyness of assembled batches, in policy versions, from the versions each trace's turns record.

A sample's staleness at step `v` is `v - oldest`, where `oldest` is the earliest version that produced any
of its model calls (`turn_policy_versions` in the trace metadata, farm/agent/versions.py; a trace without
per-turn versions falls back to the job's `metadata.policy_version`, the version current when it was
submitted). A partial rollout that crossed a publish has turns of two versions: its staleness is that of
its oldest turn, as AReaL's `max_head_offpolicyness` and NeMo RL's `max_async_level` count it.

`DapoConfig.max_offpolicyness` K: a group with any sample staler than K is left out of the batch (it is
already finished: nothing to cancel) and counted; every batch reports the distribution of what it kept.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from pydantic import BaseModel, Field

from farm.agent.versions import parse_version
from farm.models import JobResult


class StalenessReport(BaseModel):
    """The off-policyness of one batch's samples."""

    policy_version: int | None
    bound: int | None = None
    """max_offpolicyness in force (None: no bound)."""
    histogram: dict[int, int] = Field(default_factory=dict)
    """Staleness in versions -> samples of the batch at that staleness."""
    unknown: int = 0
    """Samples whose traces say no version (a backend and registration that never gave one)."""
    max: int | None = None
    mean: float | None = None
    mixed: int = 0
    """Samples whose turns came from more than one version (partial rollouts across a publish)."""
    dropped_groups: int = 0
    """Groups left out because a sample exceeded the bound."""


def turn_versions(result: JobResult) -> list[int]:
    """Every known version that produced a model call of this result, in call order."""
    versions: list[int] = []
    for trace in result.trajectory.traces:
        recorded = trace.metadata.get("turn_policy_versions")
        if isinstance(recorded, list):
            versions += [v for v in (parse_version(x) for x in recorded) if v is not None]
    if not versions:
        submitted = parse_version(result.metadata.get("policy_version"))
        if submitted is not None:
            versions.append(submitted)
    return versions


def staleness(result: JobResult, current: int) -> int | None:
    """Versions between the trainer's `current` and the oldest turn; None when no version is known."""
    versions = turn_versions(result)
    return current - min(versions) if versions else None


def within(results: Iterable[JobResult], current: int | None, bound: int | None) -> bool:
    """True when no result is more than `bound` versions behind `current` (unknown ones pass)."""
    if current is None or bound is None:
        return True
    return all((s := staleness(r, current)) is None or s <= bound for r in results)


def report(
    results: Iterable[JobResult], current: int | None, bound: int | None, dropped_groups: int = 0
) -> StalenessReport:
    histogram: Counter[int] = Counter()
    unknown = mixed = 0
    for result in results:
        versions = turn_versions(result)
        if current is None or not versions:
            unknown += 1
            continue
        histogram[current - min(versions)] += 1
        mixed += len(set(versions)) > 1
    total = sum(histogram.values())
    return StalenessReport(
        policy_version=current,
        bound=bound,
        histogram=dict(sorted(histogram.items())),
        unknown=unknown,
        max=max(histogram) if histogram else None,
        mean=sum(k * n for k, n in histogram.items()) / total if total else None,
        mixed=mixed,
        dropped_groups=dropped_groups,
    )
