"""Off-policyness of assembled batches, in policy versions, from the versions each trace's turns record.

A sample's staleness at step `v` is `v - oldest`, where `oldest` is the earliest version that produced any
of its model calls (`turn_policy_versions` in the trace metadata, farm/agent/versions.py; a trace without
per-turn versions falls back to the job's `metadata.policy_version`, the version current when it was
submitted). A partial rollout that crossed a publish has turns of two versions: its staleness is that of
its oldest turn, as AReaL's `max_head_offpolicyness` and NeMo RL's `max_async_level` count it.

`DapoConfig.max_offpolicyness` K: a group with any sample staler than K is left out of the batch (it is
already finished: nothing to cancel) and counted; every batch reports the distribution of what it kept.
`DapoConfig.stale_samples` chooses what happens to a sample past K instead: `drop_group` (the above, the
default), `discard` (the sample leaves the group, the rest is kept) or `withhold` (its tokens are not
shipped, its reward still counts in the group's baseline: a slow problem is not starved of signal).

The lag counts the queue: a sample's staleness `current - oldest turn` splits into the versions published
while it was generated (in flight: `finished_version - oldest`) and while it waited for a batch (in
queue: `current - finished_version`), and the same in seconds on the consumer's clock (sent to received,
received to assembled). Each batch reports both (`LagStats`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from enum import StrEnum

from pydantic import BaseModel, Field

from farm.agent.versions import parse_version
from farm.client.groups import Group, SampleTimes
from farm.models import JobResult
from farm.models.offpolicy import LagStats


class StaleSamples(StrEnum):
    drop_group = "drop_group"
    """A group with any sample past the bound is left out of the batch."""
    discard = "discard"
    """Samples past the bound leave their group (its baseline without them); the rest is kept."""
    withhold = "withhold"
    """Samples past the bound are not shipped (Group.withheld_results) but their rewards still count in
    the group's baseline and zero-variance check."""


def lag_stats(versions: list[int], seconds: list[float]) -> LagStats:
    return LagStats(
        samples=max(len(versions), len(seconds)),
        versions_max=max(versions) if versions else None,
        versions_mean=sum(versions) / len(versions) if versions else None,
        seconds_max=max(seconds) if seconds else None,
        seconds_mean=sum(seconds) / len(seconds) if seconds else None,
    )


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
    stale_samples: StaleSamples = StaleSamples.drop_group
    """What the bound did to a stale sample (DapoConfig.stale_samples)."""
    withheld: int = 0
    """Samples past the bound whose tokens were not shipped (their rewards kept in the baseline)."""
    discarded: int = 0
    """Samples past the bound taken out of their groups."""
    in_flight: LagStats = Field(default_factory=LagStats)
    """Lag gathered while generating: versions published between the oldest turn and the result's
    arrival; seconds from submission to arrival."""
    in_queue: LagStats = Field(default_factory=LagStats)
    """Lag gathered waiting for the batch: versions published between arrival and assembly; seconds."""


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


def bounded(
    group: Group, current: int | None, bound: int | None, mode: StaleSamples, *, filter_zero_variance: bool
) -> tuple[Group | None, int, int]:
    """The group as the bound leaves it at assembly, and how many samples it withheld and discarded;
    None when nothing of it is left to train on."""
    if current is None or bound is None:
        return group, 0, 0
    stale = [(s := staleness(r, current)) is not None and s > bound for r in group.results]
    if not any(stale):
        return group, 0, 0
    if mode is StaleSamples.drop_group:
        return None, 0, 0
    keep = [i for i, old in enumerate(stale) if not old]
    gone = [i for i, old in enumerate(stale) if old]
    fields = {
        "results": [group.results[i] for i in keep],
        "rewards": [group.rewards[i] for i in keep],
        "slots": [group.slots[i] for i in keep] if group.slots else [],
        "times": [group.times[i] for i in keep] if group.times else [],
    }
    if mode is StaleSamples.withhold:
        fields["withheld_results"] = group.withheld_results + [group.results[i] for i in gone]
        fields["withheld_rewards"] = group.withheld_rewards + [group.rewards[i] for i in gone]
    shaped = group.model_copy(update=fields)
    withheld = len(gone) if mode is StaleSamples.withhold else 0
    if not shaped.results or (filter_zero_variance and not shaped.informative):
        return None, withheld, len(gone) - withheld
    return shaped, withheld, len(gone) - withheld


def queue_lags(
    groups: Iterable[Group], current: int | None, assembled_at: float
) -> tuple[LagStats, LagStats]:
    """The in-flight and in-queue parts of the lag of the shipped samples of `groups`."""
    flight_v: list[int] = []
    queue_v: list[int] = []
    flight_s: list[float] = []
    queue_s: list[float] = []
    for group in groups:
        times: list[SampleTimes | None] = group.times or [None] * len(group.results)
        for result, when in zip(group.results, times, strict=True):
            if when is None:
                continue
            flight_s.append(when.finished_at - when.submitted_at)
            queue_s.append(assembled_at - when.finished_at)
            versions = turn_versions(result)
            if versions and when.finished_version is not None:
                flight_v.append(max(0, when.finished_version - min(versions)))
            if current is not None and when.finished_version is not None:
                queue_v.append(max(0, current - when.finished_version))
    return lag_stats(flight_v, flight_s), lag_stats(queue_v, queue_s)


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
