"""Efficient DAPO: keep the farm saturated, stop at K informative groups, carry the rest over.

Seeds 000 §3.4 and 002 (Feature 3): instead of request-a-batch / filter / repeat, the consumer
1. replenishes as soon as fewer than `concurrency` jobs are in flight (continuous throughput); each job
   is one blocking POST /process, which the API answers from a Redis pub/sub wake-up, so completions
   arrive at once and no job is polled,
2. returns once K informative groups are in (early termination),
3. either cancels unfinished work or leaves it running for the next call (cross-step carry-over),
   cancelling carried work that became more than `max_staleness` policy versions old.
With `filter_zero_variance=False` the same consumer yields plain GRPO batches.

The dataloader is any iterable of instances, or of batches of them (lists, as a torch DataLoader
with `collate_fn=list` yields): an instance is a dict exactly as `POST /process` takes it, with
`handler` and that handler's fields (`{"handler": "math", "question": ..., "answer": ...}`). Each
instance becomes one group of `n` jobs, drawn in order, lazily (only as groups are needed). Every job's
metadata carries `group_id`, `prompt_index` (the instance's position in the dataloader), `sample`,
`attempt` and, when given, `policy_version`; results and traces carry it back.

```python
with DapoConsumer("http://127.0.0.1:8000", loader, DapoConfig(n=8, concurrency=64)) as dapo:
    for step in range(steps):
        batch = dapo.next_batch(32, policy_version=step)
        train(batch.groups)
        dapo.swap_checkpoint(step + 1, ["http://gpu0:8001/v1"])
```
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

from farm.client import staleness
from farm.client.async_client import AsyncFarmClient
from farm.client.errors import FarmError, FarmTimeout, FarmUnavailable
from farm.client.groups import Counters, FailurePolicy, Group, GroupBook, JobSpec, StragglerPolicy
from farm.client.polling import PollPolicy, deadline_after
from farm.client.staleness import StalenessReport, StaleSamples
from farm.models import JobResult, SamplingParams, StageError
from farm.models.offpolicy import OffPolicyReport
from farm.retry import reconnecting

log = logging.getLogger(__name__)
CANCEL_RETRY_S = 0.2
RECONNECTS = 5
"""Times a job's blocking request is re-sent after the connection to the API failed."""

REFUSED_STATUSES = frozenset({400, 404, 409, 413, 422})
"""Answers to POST /process that mean "this job, not the farm": the sample fails, the run goes on."""


RUN_ID_PATTERN = r"^[A-Za-z0-9._:@-]+$"


class DapoConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    n: int = Field(8, ge=1)
    """Samples per prompt (GRPO group size)."""
    concurrency: int = Field(64, ge=1)
    """Jobs kept in flight on the farm."""
    sampling_params: SamplingParams = Field(default_factory=SamplingParams)
    job_timeout_s: float | None = Field(None, gt=0)
    """Per-job budget sent as `timeout_s` (time inside stages)."""
    seed: int | None = None
    """Set: every job gets sampling seed f(seed, prompt, sample, attempt), so two runs over the same
    dataloader draw the same samples (fair comparisons); None: the seed in `sampling_params`, if any."""
    filter_zero_variance: bool = True
    """False: plain GRPO batches (every complete group is returned)."""
    failure_policy: FailurePolicy = FailurePolicy.retry
    max_retries: int = Field(2, ge=0)
    carry_over: bool = True
    """True: unfinished jobs and surplus groups feed the next call; False: cancelled / discarded."""
    max_staleness: int | None = Field(1, ge=0)
    """Carried work opened more than this many policy versions ago is cancelled; None: never."""
    min_usable: int | None = Field(None, ge=1)
    """A group is delivered once this many of its `n` samples succeeded (stragglers handled as
    `stragglers` says); None: when all `n` are in."""
    group_deadline_s: float | None = Field(None, gt=0)
    """A group is delivered with the samples it has this long after it was opened (a group with none is
    dropped, counted `dropped_deadline`); None: no deadline. A rollout that hangs no longer stalls a step."""
    stragglers: StragglerPolicy = StragglerPolicy.cancel
    """Samples still running when their group is delivered early: cancelled, or left to finish."""
    max_offpolicyness: int | None = Field(None, ge=0)
    """Finished groups with a sample whose oldest turn is more than this many versions behind the batch's
    policy_version are left out of batches (farm/client/staleness.py); None: no bound."""
    stale_samples: StaleSamples = StaleSamples.drop_group
    """What `max_offpolicyness` does to a sample past it at assembly: drop its group (drop_group), take it
    out of its group (discard), or keep its reward in the group's baseline without shipping its tokens
    (withhold). Counted in the batch's staleness report either way."""

    report_offpolicy: bool = True
    """Send each batch's off-policy lag to the farm's gauges (POST /metrics/offpolicy; best effort)."""
    run_id: str = Field(default_factory=lambda: f"dapo-{uuid.uuid4().hex[:10]}", pattern=RUN_ID_PATTERN)
    """Prefix of every group and job id (unique per consumer, so runs never collide on the farm)."""
    extra_metadata: dict[str, Any] = Field(default_factory=dict)
    """Copied into every job's metadata (e.g. experiment name)."""

    @model_validator(mode="after")
    def _min_usable(self) -> DapoConfig:
        if self.min_usable is not None and self.min_usable > self.n:
            raise ValueError(f"min_usable ({self.min_usable}) is more than n ({self.n})")
        return self


class BatchStats(BaseModel):
    groups: int
    submitted: int
    completed: int
    failed: int
    infra_failed: int
    """Of `failed`, those that ended with an infrastructure failure class (farm.models.failures: a sandbox
    or evaluator lost, backends unreachable...): never counted as a reward, under any failure policy."""
    retried: int
    cancelled: int
    dropped_zero_variance: int
    dropped_failed: int
    dropped_stale: int
    discarded: int
    carried_jobs: int
    """Jobs left pending or in flight for the next call."""
    carried_groups: int
    """Accepted groups beyond K kept for the next call."""
    exhausted: bool
    """The dataloader ran out before K groups came in."""
    wall_time_s: float
    delivered_min_usable: int = 0
    """Groups delivered once `min_usable` samples were in (DapoConfig.min_usable)."""
    delivered_deadline: int = 0
    """Groups delivered at their deadline with fewer than `n` samples (DapoConfig.group_deadline_s)."""
    dropped_deadline: int = 0
    stragglers_cancelled: int = 0
    stragglers_left: int = 0
    staleness: StalenessReport | None = None
    """Off-policyness of the batch's samples in versions (per-turn versions, farm/client/staleness.py)."""


class Batch(BaseModel):
    groups: list[Group]
    stats: BatchStats

    @property
    def results(self) -> list[JobResult]:
        return [result for group in self.groups for result in group.results]


def job_seed(seed: int, spec: JobSpec) -> int:
    """Deterministic per (run seed, prompt, sample, attempt); fits a 31-bit signed seed."""
    prompt = int(spec.metadata.get("prompt_index", 0))
    return (seed * 1_000_003 + prompt * 10_007 + spec.slot * 101 + spec.attempt) % (2**31 - 1)


def _instances(dataloader: Iterable[Any]) -> Iterator[Mapping[str, Any]]:
    """Instances one by one; a dataloader that yields batches (lists of instances) is flattened."""
    for item in dataloader:
        if isinstance(item, Mapping):
            yield item
        else:
            yield from item


class AsyncDapoConsumer:
    def __init__(
        self,
        client: AsyncFarmClient,
        dataloader: Iterable[Any],
        config: DapoConfig | None = None,
    ) -> None:
        self.client = client
        self.config = config or DapoConfig()
        self.book = GroupBook(
            self.config.n,
            run_id=self.config.run_id,
            filter_zero_variance=self.config.filter_zero_variance,
            failure_policy=self.config.failure_policy,
            max_retries=self.config.max_retries,
            min_usable=self.config.min_usable,
            deadline_s=self.config.group_deadline_s,
            stragglers=self.config.stragglers,
        )
        self._running: dict[str, asyncio.Task[JobResult]] = {}
        """job id -> its blocking POST /process, for every job the book counts as in flight."""
        self._specs: dict[str, JobSpec] = {}
        self._instances = _instances(dataloader)
        self._next_prompt = 0
        self._exhausted = False
        self._offpolicy_dropped = 0
        self._withheld = 0
        self._discarded = 0

    @property
    def policy_version(self) -> int | None:
        return self.book.policy_version

    async def next_batch(
        self, k: int, *, policy_version: int | None = None, timeout_s: float | None = None
    ) -> Batch:
        """Exactly `k` groups (fewer only if the dataloader runs out); FarmTimeout after `timeout_s`."""
        if k < 1:
            raise ValueError("k must be >= 1")
        started = time.monotonic()
        before = self.book.counters.copy()
        if policy_version is not None:
            await self._set_version(policy_version)
        deadline = deadline_after(timeout_s)
        self._offpolicy_dropped = self._withheld = self._discarded = 0
        while self._ready_within_bound() < k:
            self._fill()
            if not self._running:
                break  # dataloader exhausted and nothing left running
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            group_due = self.book.next_deadline()
            wait = remaining
            if group_due is not None:
                until_group = max(0.0, group_due - time.monotonic())
                wait = until_group if wait is None else min(wait, until_group)
            done, _ = await asyncio.wait(
                self._running.values(), timeout=wait, return_when=asyncio.FIRST_COMPLETED
            )
            await self._cancel(self.book.deliver_expired())
            if not done and deadline is not None and time.monotonic() >= deadline:
                c, last = self.book.counters - before, self.book.last_error
                seen = f"{last.stage}/{last.type}: {last.message[:200]}" if last else "none"
                raise FarmTimeout(
                    f"{self.book.ready_count}/{k} groups after {timeout_s}s (submitted {c.submitted}, "
                    f"failed {c.failed}, zero-variance {c.dropped_zero_variance}; last error: {seen})",
                    pending=self.book.in_flight,
                )
            await self._collect()
        groups = self.book.take(k)
        if not self.config.carry_over:
            await self._cancel(self.book.abandon())
        batch = Batch(groups=groups, stats=self._stats(groups, self.book.counters - before, started))
        if self.config.report_offpolicy and batch.stats.staleness is not None:
            await self._report(batch.stats.staleness)
        return batch

    async def _report(self, report: StalenessReport) -> None:
        lag = OffPolicyReport(
            run_id=self.config.run_id,
            policy_version=report.policy_version,
            in_flight=report.in_flight,
            in_queue=report.in_queue,
            withheld=report.withheld,
            discarded=report.discarded,
            dropped_groups=report.dropped_groups,
        )
        try:
            await self.client.report_offpolicy(lag)
        except FarmError as exc:  # gauges are best effort; the batch is what matters
            log.warning("off-policy lag of %s not reported: %s", self.config.run_id, exc)

    async def swap_checkpoint(
        self, policy_version: int, backends: Sequence[str], *, kind: str = "vllm"
    ) -> list[Any]:
        """Between steps: move to `policy_version` (cancelling too-stale carried work), re-point the pool."""
        await self._set_version(policy_version)
        return await self.client.swap_llm_servers(backends, kind=kind)

    async def close(self) -> None:
        """Cancel everything this consumer still has on the farm."""
        await self._cancel(self.book.abandon())

    def _ready_within_bound(self) -> int:
        """Finished groups usable now: those over max_offpolicyness are left out (and counted)."""
        bound, current = self.config.max_offpolicyness, self.book.policy_version
        if bound is not None and current is not None:
            mode, zero_variance = self.config.stale_samples, self.config.filter_zero_variance

            def reshape(group: Group) -> Group | None:
                shaped, withheld, discarded = staleness.bounded(
                    group, current, bound, mode, filter_zero_variance=zero_variance
                )
                self._withheld += withheld
                self._discarded += discarded
                return shaped

            self._offpolicy_dropped += self.book.reshape_ready(reshape)
        return self.book.ready_count

    async def _set_version(self, policy_version: int) -> None:
        self.book.policy_version = policy_version
        await self._cancel(self.book.drop_stale(policy_version, self.config.max_staleness))

    def _fill(self) -> None:
        """Open prompts and start one blocking POST /process per job until the budget is in flight."""
        budget = self.config.concurrency
        while self.book.wants_new_group(budget) and not self._exhausted:
            instance = next(self._instances, None)
            if instance is None:
                self._exhausted = True
                break
            self.book.open_group(instance, self._next_prompt)
            self._next_prompt += 1
        for spec in self.book.next_submissions(budget):
            self._specs[spec.job_id] = spec
            self._running[spec.job_id] = asyncio.create_task(self._process(spec), name=spec.job_id)

    async def _process(self, spec: JobSpec) -> JobResult:
        # Re-sending the same job id waits for the job already queued, so a dropped connection
        # (API restart, proxy idle cut) is retried without running the job twice.
        result: JobResult = await reconnecting(FarmUnavailable, RECONNECTS + 1)(
            self.client.process,
            spec.instance,
            self._sampling_params(spec),
            job_id=spec.job_id,
            timeout_s=self.config.job_timeout_s,
            metadata={**self.config.extra_metadata, **spec.metadata},
        )
        return result

    async def _collect(self) -> None:
        """Feed every finished request to the book; a refused job fails through the failure policy."""
        to_cancel: list[str] = []
        for job_id, task in [(j, t) for j, t in self._running.items() if t.done()]:
            del self._running[job_id]
            spec = self._specs.pop(job_id)
            error = task.exception()
            if error is None:
                to_cancel += self.book.record(task.result())
            elif isinstance(error, FarmError) and error.status in REFUSED_STATUSES:
                failure = StageError(stage="api", type=f"http_{error.status}", message=str(error))
                to_cancel += self.book.record_submit_failure(spec, failure)
            else:
                raise error
        await self._cancel(to_cancel)

    def _sampling_params(self, spec: JobSpec) -> SamplingParams:
        if self.config.seed is None:
            return self.config.sampling_params
        return self.config.sampling_params.model_copy(update={"seed": job_seed(self.config.seed, spec)})

    async def _cancel(self, job_ids: list[str]) -> None:
        for job_id in job_ids:
            self._specs.pop(job_id, None)
            task = self._running.pop(job_id, None)
            if task is not None:
                task.cancel()
        if job_ids:
            await asyncio.gather(*(self._cancel_one(job_id) for job_id in job_ids))

    async def _cancel_one(self, job_id: str) -> None:
        # 404: the POST /process was refused or never sent; or it is still in flight to the API, so
        # ask once more after a moment rather than leave an orphan running.
        for attempt in range(2):
            try:
                await self.client.cancel(job_id)
                return
            except FarmError as exc:
                if exc.status != 404:
                    raise
            if attempt == 0:
                await asyncio.sleep(CANCEL_RETRY_S)

    def _stats(self, groups: list[Group], delta: Counters, started: float) -> BatchStats:
        return BatchStats(
            groups=len(groups),
            submitted=delta.submitted,
            completed=delta.completed,
            failed=delta.failed,
            infra_failed=delta.infra_failed,
            retried=delta.retried,
            cancelled=delta.cancelled,
            dropped_zero_variance=delta.dropped_zero_variance,
            dropped_failed=delta.dropped_failed,
            dropped_stale=delta.dropped_stale,
            discarded=delta.discarded_ready,
            carried_jobs=len(self.book.in_flight) + self.book.pending_count,
            carried_groups=self.book.ready_count,
            exhausted=self._exhausted and self.book.idle(),
            wall_time_s=time.monotonic() - started,
            delivered_min_usable=delta.delivered_min_usable,
            delivered_deadline=delta.delivered_deadline,
            dropped_deadline=delta.dropped_deadline,
            stragglers_cancelled=delta.stragglers_cancelled,
            stragglers_left=delta.stragglers_left,
            staleness=self._staleness(groups),
        )

    def _staleness(self, groups: list[Group]) -> StalenessReport:
        current = self.book.policy_version
        in_flight, in_queue = staleness.queue_lags(groups, current, time.monotonic())
        base = staleness.report(
            (r for g in groups for r in g.results),
            current,
            self.config.max_offpolicyness,
            self._offpolicy_dropped,
        )
        return base.model_copy(
            update={
                "stale_samples": self.config.stale_samples,
                "withheld": self._withheld,
                "discarded": self._discarded,
                "in_flight": in_flight,
                "in_queue": in_queue,
            }
        )


class DapoConsumer:
    """Blocking face of AsyncDapoConsumer for synchronous trainers; owns a private event loop, so use
    AsyncDapoConsumer instead from code that already runs inside one (e.g. a notebook cell)."""

    def __init__(
        self,
        base_url: str | None,
        dataloader: Iterable[Any],
        config: DapoConfig | None = None,
        *,
        token: str | None = None,
        poll: PollPolicy | None = None,
    ) -> None:
        self._runner = asyncio.Runner()
        self._client: AsyncFarmClient = self._runner.run(self._make_client(base_url, token, poll))
        self._consumer = AsyncDapoConsumer(self._client, dataloader, config)

    @staticmethod
    async def _make_client(
        base_url: str | None, token: str | None, poll: PollPolicy | None
    ) -> AsyncFarmClient:
        return AsyncFarmClient(base_url, token=token, poll=poll)

    @property
    def book(self) -> GroupBook:
        return self._consumer.book

    @property
    def config(self) -> DapoConfig:
        return self._consumer.config

    def next_batch(
        self, k: int, *, policy_version: int | None = None, timeout_s: float | None = None
    ) -> Batch:
        return self._runner.run(
            self._consumer.next_batch(k, policy_version=policy_version, timeout_s=timeout_s)
        )

    def swap_checkpoint(
        self, policy_version: int, backends: Sequence[str], *, kind: str = "vllm"
    ) -> list[Any]:
        return self._runner.run(self._consumer.swap_checkpoint(policy_version, backends, kind=kind))

    def close(self) -> None:
        """Cancel carried work, close the HTTP client and the loop."""
        try:
            self._runner.run(self._consumer.close())
        finally:
            self._runner.run(self._client.close())
            self._runner.close()

    def __enter__(self) -> DapoConsumer:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()
