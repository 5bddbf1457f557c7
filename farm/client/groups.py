"""Pure bookkeeping of the DAPO consumer: which jobs to submit, how results form groups, which groups count.

No I/O here. The driver (`farm.client.dapo`) asks the book what to submit, feeds it finished results and
carries out the cancellations the book asks for; everything that decides is in this module and tested
without a server.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, fields
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from farm.models import JobResult, JobState, StageError
from farm.models.failures import infrastructure_failure, rollout_failure


class FailurePolicy(StrEnum):
    drop = "drop"
    """A group with any failed sample is dropped; its other samples are cancelled at once."""
    zero = "zero"
    """A failed sample counts as reward 0.0 (its result stays in the group, state not `done`), except an
    infrastructure failure (farm.models.failures), which is never a reward: it is retried like under
    `retry`, then its group dropped."""
    retry = "retry"
    """A failed sample is resubmitted up to `max_retries` times, then the group is dropped."""


class StragglerPolicy(StrEnum):
    cancel = "cancel"
    """Samples still running when their group is delivered early are cancelled."""
    finish = "finish"
    """They are left to finish (their results are not added to the delivered group)."""


class Rerun(BaseModel):
    """One sample submitted again after its job failed (the failure policy's retries)."""

    model_config = ConfigDict(frozen=True)

    slot: int
    job_id: str
    """The new job."""
    replaced: str
    """The job that failed."""
    reason: str
    """Its failure class (`error.type`)."""
    infrastructure: bool
    """The class is an infrastructure failure (farm.models.failures)."""


class SampleTimes(BaseModel):
    """When one sample was sent and came back, on the consumer's clock, and the trainer's version then."""

    model_config = ConfigDict(frozen=True)

    submitted_at: float
    finished_at: float
    """When the consumer received the result (time.monotonic of the consumer's process)."""
    finished_version: int | None
    """The consumer's policy_version when it received the result (in-flight vs in-queue lag)."""


class Group(BaseModel):
    """`n` samples of one prompt, in slot order, as handed to the trainer (fewer when the group was delivered
    early: `min_usable` reached or its deadline passed)."""

    model_config = ConfigDict(frozen=True)

    group_id: str
    prompt_index: int
    """Position of the instance in the dataloader stream (0-based, across calls)."""
    instance: dict[str, Any]
    policy_version: int | None
    """Version current when the group was opened (its oldest sample)."""
    results: list[JobResult]
    rewards: list[float]
    """Aligned with `results`; failed samples under FailurePolicy.zero show 0.0 here."""
    slots: list[int] = Field(default_factory=list)
    """Aligned with `results`: each sample's slot (0..n-1); a group delivered early misses some."""
    delivered_reason: str = "complete"
    """complete: every slot has a result; min_usable: enough usable samples were in; deadline: the group
    deadline passed (DapoConfig.group_deadline_s)."""
    stragglers: list[str] = Field(default_factory=list)
    """Job ids still running at delivery: cancelled, or left to finish, as DapoConfig.stragglers says."""
    reruns: list[Rerun] = Field(default_factory=list)
    """Samples re-run one by one after a failure (which, as which job, and why)."""
    times: list[SampleTimes | None] = Field(default_factory=list)
    """Aligned with `results`: when each sample was sent and received (off-policy lag at assembly)."""
    withheld_results: list[JobResult] = Field(default_factory=list)
    """Samples past the off-policy bound under `stale_samples="withhold"`: their tokens are not shipped
    (not in `results`, so no adapter trains on them), their rewards still count in `baseline`."""
    withheld_rewards: list[float] = Field(default_factory=list)

    @property
    def baseline(self) -> float:
        """Mean reward of every sample of the group, withheld ones included (the GRPO baseline)."""
        every = self.rewards + self.withheld_rewards
        return sum(every) / len(every) if every else 0.0

    @property
    def informative(self) -> bool:
        return reward_spread(self.rewards + self.withheld_rewards) > REWARD_TOLERANCE


REWARD_TOLERANCE = 1e-9


def reward_spread(rewards: list[float]) -> float:
    return max(rewards) - min(rewards) if rewards else 0.0


def succeeded(result: JobResult) -> bool:
    return result.state is JobState.done and result.reward is not None


@dataclass(frozen=True)
class JobSpec:
    """One POST /process the driver must send."""

    job_id: str
    group_id: str
    slot: int
    attempt: int
    instance: dict[str, Any]
    metadata: dict[str, Any]


@dataclass
class Counters:
    submitted: int = 0
    completed: int = 0
    """Terminal results received (any state)."""
    failed: int = 0
    infra_failed: int = 0
    """Failed results whose class is an infrastructure failure: never a reward (retried or dropped)."""
    retried: int = 0
    cancelled: int = 0
    """Jobs the book asked to cancel (dropped groups, stale work, abandoned at the end of a call)."""
    groups_opened: int = 0
    groups_accepted: int = 0
    dropped_zero_variance: int = 0
    dropped_failed: int = 0
    dropped_stale: int = 0
    discarded_ready: int = 0
    """Accepted groups thrown away because carry-over was off and more than K came in."""
    delivered_min_usable: int = 0
    """Groups delivered once `min_usable` samples were in, before every sample ended."""
    delivered_deadline: int = 0
    """Groups delivered with what they had when their deadline passed."""
    dropped_deadline: int = 0
    """Groups whose deadline passed with no usable sample."""
    stragglers_cancelled: int = 0
    stragglers_left: int = 0
    """Jobs of delivered groups left to finish (StragglerPolicy.finish); their results are not used."""

    def __sub__(self, other: Counters) -> Counters:
        return Counters(**{f.name: getattr(self, f.name) - getattr(other, f.name) for f in fields(self)})

    def copy(self) -> Counters:
        return Counters(**{f.name: getattr(self, f.name) for f in fields(self)})


@dataclass
class _OpenGroup:
    group_id: str
    prompt_index: int
    instance: dict[str, Any]
    policy_version: int | None
    opened_at: float = 0.0
    results: dict[int, JobResult] = field(default_factory=dict)
    rewards: dict[int, float] = field(default_factory=dict)
    live: dict[str, int] = field(default_factory=dict)
    """job id -> slot for jobs pending or in flight."""
    reruns: list[Rerun] = field(default_factory=list)
    times: dict[int, SampleTimes] = field(default_factory=dict)

    def usable(self) -> int:
        return sum(succeeded(r) for r in self.results.values())


class GroupBook:
    """Groups of `n` samples per prompt; submission order; failure policy; zero-variance filter."""

    def __init__(
        self,
        n: int,
        *,
        run_id: str,
        filter_zero_variance: bool = True,
        failure_policy: FailurePolicy = FailurePolicy.retry,
        max_retries: int = 2,
        min_usable: int | None = None,
        deadline_s: float | None = None,
        stragglers: StragglerPolicy = StragglerPolicy.cancel,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if n < 1:
            raise ValueError("n must be >= 1")
        if filter_zero_variance and n < 2:
            raise ValueError("zero-variance filtering needs n >= 2 samples per prompt")
        self.n = n
        self.run_id = run_id
        self.filter_zero_variance = filter_zero_variance
        self.failure_policy = FailurePolicy(failure_policy)
        self.max_retries = max_retries
        if min_usable is not None and not 1 <= min_usable <= n:
            raise ValueError("min_usable must be between 1 and n")
        self.min_usable = min_usable
        """A group is delivered once this many samples succeeded (None: when all n are in)."""
        self.deadline_s = deadline_s
        """A group is delivered with what it has this long after it was opened (None: never)."""
        self.stragglers = StragglerPolicy(stragglers)
        self._clock = clock
        self.counters = Counters()
        self._pending: deque[JobSpec] = deque()
        self._in_flight: dict[str, JobSpec] = {}
        self._submitted_at: dict[str, float] = {}
        self.policy_version: int | None = None
        """Stamped on every job submitted from now on (set by the driver at each step)."""
        self._open: dict[str, _OpenGroup] = {}
        self._ready: deque[Group] = deque()
        self._next_group = 0
        self.last_error: StageError | None = None
        """The most recent failure seen, for diagnostics."""

    # --- views ------------------------------------------------------------------------------------

    @property
    def in_flight(self) -> list[str]:
        return list(self._in_flight)

    @property
    def pending_count(self) -> int:
        return len(self._pending)

    @property
    def ready_count(self) -> int:
        return len(self._ready)

    @property
    def open_group_count(self) -> int:
        return len(self._open)

    def idle(self) -> bool:
        """Nothing pending and nothing in flight."""
        return not self._pending and not self._in_flight

    def wants_new_group(self, budget: int) -> bool:
        """Open another prompt only while in-flight plus queued work is short of the budget."""
        return len(self._in_flight) + len(self._pending) < budget

    # --- opening and submitting -------------------------------------------------------------------

    def open_group(self, instance: Mapping[str, Any], prompt_index: int) -> str:
        group_id = f"{self.run_id}-g{self._next_group}"
        self._next_group += 1
        group = _OpenGroup(group_id, prompt_index, dict(instance), self.policy_version, self._clock())
        self._open[group_id] = group
        self.counters.groups_opened += 1
        for slot in range(self.n):
            self._enqueue(group, slot, attempt=0, front=False)
        return group_id

    def _enqueue(self, group: _OpenGroup, slot: int, *, attempt: int, front: bool) -> str:
        job_id = f"{group.group_id}-s{slot}" + (f"-r{attempt}" if attempt else "")
        metadata: dict[str, Any] = {
            "group_id": group.group_id,
            "prompt_index": group.prompt_index,
            "sample": slot,
            "attempt": attempt,
        }
        if self.policy_version is not None:
            metadata["policy_version"] = self.policy_version
        spec = JobSpec(job_id, group.group_id, slot, attempt, group.instance, metadata)
        group.live[job_id] = slot
        if front:
            self._pending.appendleft(spec)
        else:
            self._pending.append(spec)
        return job_id

    def next_submissions(self, budget: int) -> list[JobSpec]:
        """Take pending specs until `budget` jobs are in flight; they count as in flight from now on."""
        taken: list[JobSpec] = []
        while self._pending and len(self._in_flight) < budget:
            spec = self._pending.popleft()
            self._in_flight[spec.job_id] = spec
            self._submitted_at[spec.job_id] = self._clock()
            taken.append(spec)
        self.counters.submitted += len(taken)
        return taken

    # --- results ----------------------------------------------------------------------------------

    def record(self, result: JobResult) -> list[str]:
        """Take one terminal result; returns job ids to cancel (siblings of a dropped group)."""
        spec = self._in_flight.pop(result.job_id, None)
        submitted_at = self._submitted_at.pop(result.job_id, None)
        if spec is None:
            return []  # not ours any more (cancelled, or a duplicate report)
        group = self._open.get(spec.group_id)
        if group is None:
            return []  # a straggler of a group delivered without it, left to finish
        slot = group.live.pop(result.job_id)
        now = self._clock()
        group.times[slot] = SampleTimes(
            submitted_at=now if submitted_at is None else submitted_at,
            finished_at=now,
            finished_version=self.policy_version,
        )
        self.counters.completed += 1
        if succeeded(result):
            group.results[slot] = result
            group.rewards[slot] = float(result.reward)  # type: ignore[arg-type]
            return self._maybe_close(group)
        self.counters.failed += 1
        self.last_error = result.error or StageError(
            stage="?", type=result.state.value, message="no error given"
        )
        infrastructure = infrastructure_failure(result) is not None
        self.counters.infra_failed += infrastructure
        # The rollout's own failures (a limit it broke, its budget spent) are its 0 under every policy.
        if (self.failure_policy is FailurePolicy.zero and not infrastructure) or rollout_failure(result):
            group.results[slot] = result
            group.rewards[slot] = 0.0
            return self._maybe_close(group)
        retrying = self.failure_policy is FailurePolicy.retry or (
            self.failure_policy is FailurePolicy.zero and infrastructure
        )
        if retrying and spec.attempt < self.max_retries:
            self.counters.retried += 1
            job_id = self._enqueue(group, slot, attempt=spec.attempt + 1, front=True)
            reason = result.error.type if result.error else result.state.value
            group.reruns.append(
                Rerun(
                    slot=slot,
                    job_id=job_id,
                    replaced=result.job_id,
                    reason=reason,
                    infrastructure=infrastructure,
                )
            )
            return []
        self.counters.dropped_failed += 1
        return self._drop(group)

    def record_submit_failure(self, spec: JobSpec, error: StageError) -> list[str]:
        """The farm refused the job (e.g. 422): treat it like a job that failed before any stage."""
        return self.record(
            JobResult(
                job_id=spec.job_id,
                state=JobState.failed,
                handler=str(spec.instance.get("handler", "")),
                error=error,
                metadata=spec.metadata,
            )
        )

    def _maybe_close(self, group: _OpenGroup) -> list[str]:
        if len(group.results) == self.n:
            return self._deliver(group, "complete")
        if self.min_usable is not None and group.usable() >= self.min_usable:
            self.counters.delivered_min_usable += 1
            return self._deliver(group, "min_usable")
        return []

    def _deliver(self, group: _OpenGroup, reason: str) -> list[str]:
        """Close the group with the results it has; returns stragglers to cancel (StragglerPolicy)."""
        del self._open[group.group_id]
        live = set(group.live)
        self._pending = deque(spec for spec in self._pending if spec.job_id not in live)
        stragglers = [job_id for job_id in group.live if job_id in self._in_flight]
        to_cancel: list[str] = []
        if self.stragglers is StragglerPolicy.cancel:
            for job_id in stragglers:
                del self._in_flight[job_id]
                self._submitted_at.pop(job_id, None)
            to_cancel = stragglers
            self.counters.stragglers_cancelled += len(stragglers)
            self.counters.cancelled += len(stragglers)
        else:
            self.counters.stragglers_left += len(stragglers)
        group.live.clear()
        slots = sorted(group.results)
        done = Group(
            group_id=group.group_id,
            prompt_index=group.prompt_index,
            instance=group.instance,
            policy_version=group.policy_version,
            results=[group.results[s] for s in slots],
            rewards=[group.rewards[s] for s in slots],
            slots=slots,
            delivered_reason=reason,
            stragglers=stragglers,
            reruns=list(group.reruns),
            times=[group.times.get(s) for s in slots],
        )
        if self.filter_zero_variance and not done.informative:
            self.counters.dropped_zero_variance += 1
        else:
            self.counters.groups_accepted += 1
            self._ready.append(done)
        return to_cancel

    def next_deadline(self) -> float | None:
        """When the earliest open group's deadline passes (on the book's clock); None without deadlines."""
        if self.deadline_s is None or not self._open:
            return None
        return min(g.opened_at for g in self._open.values()) + self.deadline_s

    def deliver_expired(self) -> list[str]:
        """Deliver every open group whose deadline passed with the samples it has (a group with none is
        dropped); returns the jobs to cancel."""
        if self.deadline_s is None:
            return []
        now = self._clock()
        to_cancel: list[str] = []
        for group in [g for g in self._open.values() if now >= g.opened_at + self.deadline_s]:
            if group.results:
                self.counters.delivered_deadline += 1
                to_cancel += self._deliver(group, "deadline")
            else:
                self.counters.dropped_deadline += 1
                to_cancel += self._drop(group)
        return to_cancel

    def _drop(self, group: _OpenGroup) -> list[str]:
        """Forget a group; returns its in-flight job ids (to cancel). Its pending specs are removed."""
        self._open.pop(group.group_id, None)
        live = set(group.live)
        self._pending = deque(spec for spec in self._pending if spec.job_id not in live)
        to_cancel = [job_id for job_id in live if self._in_flight.pop(job_id, None) is not None]
        for job_id in live:
            self._submitted_at.pop(job_id, None)
        group.live.clear()
        self.counters.cancelled += len(to_cancel)
        return to_cancel

    # --- step boundaries --------------------------------------------------------------------------

    def drop_stale(self, policy_version: int | None, max_staleness: int | None) -> list[str]:
        """Drop open and ready groups older than `max_staleness` versions; returns jobs to cancel."""
        if policy_version is None or max_staleness is None:
            return []
        oldest_allowed = policy_version - max_staleness

        def stale(version: int | None) -> bool:
            return version is not None and version < oldest_allowed

        to_cancel: list[str] = []
        for group in [g for g in self._open.values() if stale(g.policy_version)]:
            self.counters.dropped_stale += 1
            to_cancel += self._drop(group)
        fresh = deque(g for g in self._ready if not stale(g.policy_version))
        self.counters.dropped_stale += len(self._ready) - len(fresh)
        self._ready = fresh
        return to_cancel

    def keep_ready(self, keep: Callable[[Group], bool]) -> int:
        """Leave out finished groups that fail `keep` (e.g. too off-policy); returns how many."""
        kept = deque(g for g in self._ready if keep(g))
        dropped = len(self._ready) - len(kept)
        self._ready = kept
        return dropped

    def reshape_ready(self, reshape: Callable[[Group], Group | None]) -> int:
        """Replace each finished group by `reshape(group)`, leaving out those it maps to None; returns how
        many were left out (e.g. stale samples withheld or discarded at assembly)."""
        reshaped = [reshape(g) for g in self._ready]
        kept = deque(g for g in reshaped if g is not None)
        dropped = len(self._ready) - len(kept)
        self._ready = kept
        return dropped

    def take(self, k: int) -> list[Group]:
        return [self._ready.popleft() for _ in range(min(k, len(self._ready)))]

    def abandon(self) -> list[str]:
        """End of a call without carry-over: forget open work and surplus groups; returns jobs to cancel."""
        to_cancel: list[str] = []
        for group in list(self._open.values()):
            to_cancel += self._drop(group)
        left = [job_id for job_id, spec in self._in_flight.items() if spec.group_id not in self._open]
        for job_id in left:  # stragglers of delivered groups, left to finish until now
            del self._in_flight[job_id]
            self._submitted_at.pop(job_id, None)
        to_cancel += left
        self.counters.cancelled += len(left)
        self.counters.discarded_ready += len(self._ready)
        self._ready.clear()
        return to_cancel
