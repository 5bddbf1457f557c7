"""One stage of one job, from start to the point where the chain moves on or the job ends.

Every exit path leaves the job either ready for its next stage or in exactly one terminal state
with a well-formed JobResult: handler errors go through the handler's exception callback,
cancellation and spent budgets end as `cancelled` / `timeout` with what was captured. Each stage
runs under a lease (farm/jobs/scripts.py); its writes are fenced by the lease's token.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from farm import tracing
from farm.agent.model_client import PolicyClient
from farm.agent.versions import max_lag, min_version
from farm.celery_app import run_queue_here
from farm.chat.tokenizer import ChatTokenizer
from farm.errors import JobCancelled, JobDeadlineExceeded, LeaseLost, NoBackendAvailable, WorkerDraining
from farm.handler.context import JobContext
from farm.handler.protocol import AgentHandler, RunOutput, exception_hook
from farm.handler.registry import get_handler
from farm.inference.errors import BackendUnavailable
from farm.jobs.dispatch import FOLLOWING_STAGE, stage_task_id
from farm.jobs.store import JobRecord, JobStore, StageHandoff, terminal_result
from farm.models.results import JobResult, JobState, StageError, Trajectory
from farm.settings import get_settings
from tasks.backpressure import wait_for_ready_slot
from tasks.monitor import job_monitor
from tasks.resume import resend, resume_stages
from tasks.services import backend_pool, job_store, stage_messages

log = logging.getLogger(__name__)


class Attempt:
    """This worker's hold on one stage of one job: the fencing token goes with every write."""

    def __init__(self, store: JobStore, record: JobRecord, stage: str, token: int) -> None:
        self.store = store
        self.record = record
        self.stage = stage
        self.token = token
        self.pinned = record.backend_pinned
        """Whether the job has used a backend (and so holds a pin to release when it ends)."""

    @property
    def job_id(self) -> str:
        return self.record.job_id

    def finish(self, result: JobResult) -> bool:
        if not self.store.finalize(result, token=self.token):
            return False
        if self.pinned:
            backend_pool().release(result.job_id)
        log.info("job %s ended %s", result.job_id, result.state.value)
        return True

    def holds_lease(self) -> bool:
        """Whether this attempt still holds the job's lease, renewing it: if so, no retry can take the
        job for another lease period, so a teardown that starts now cannot hit a retry's sandbox."""
        return self.job_id not in self.store.renew({self.job_id: self.token})

    def end_stage(self, elapsed_s: float, handoff: StageHandoff) -> bool:
        """Records the stage done and enqueues the next one, in one step (False: the lease was lost)."""
        following = FOLLOWING_STAGE[self.stage]
        node_local = following == "run" and get_handler(self.record.spec.handler).node_local
        queue = run_queue_here(node_local) if following == "run" else following
        message = stage_messages().build(self.job_id, following, stage_task_id(self.job_id, following), queue)
        return self.store.end_stage(self.job_id, self.token, self.stage, elapsed_s, message, handoff)


def _context(
    record: JobRecord,
    handler: AgentHandler,
    stage: str,
    interruption: Callable[[], str | None],
    attempt: Attempt | None = None,
) -> JobContext:
    settings = get_settings()
    timings = record.timings()
    started = time.monotonic()

    def policy_factory(ctx: JobContext) -> PolicyClient:
        if attempt is not None and not attempt.pinned:
            attempt.pinned = True  # remembered in the record, so whichever stage ends the job releases it
            job_store().mark_pinned(ctx.job_id)
        lag = max_lag(ctx.metadata, settings.max_policy_lag)
        return PolicyClient(
            backend_pool(),
            ctx.job_id,
            ctx.check,
            ctx.remaining,
            max_policy_lag=lag,
            min_policy_version=min_version(ctx.metadata),
        )

    return JobContext(
        spec=record.spec,
        instance=handler.validate(record.spec.instance),
        stage=stage,
        node=settings.node,
        workdir=Path(settings.workdir) / "jobs" / record.job_id.replace("/", "_"),
        deadline=started + record.spec.timeout_s - timings.in_stages,
        timings_before=timings,
        interruption=interruption,
        policy_factory=policy_factory,
        tokenizer_factory=lambda: ChatTokenizer.load(settings.tokenizer),
        started=started,
    )


def execute_stage(job_id: str, stage: str, hostname: str | None = None) -> None:
    store = job_store()
    owner = hostname or get_settings().node
    granted_at = time.monotonic()  # the lease runs from (no earlier than) the BEGIN's sending
    verdict, record, token = store.begin_stage(job_id, stage, owner)
    if verdict in ("missing", "terminal", "done", "leased") or record is None:
        # Gone, over, a redelivery of a stage that finished (its end sent the next one), or a live
        # attempt elsewhere runs it.
        return
    if verdict in ("revoked", "expired"):
        if stage == "run":
            _release_init_state(record)
        state = JobState.cancelled if verdict == "revoked" else JobState.timeout
        message = (
            "cancelled before the stage started" if verdict == "revoked" else "budget spent before the stage"
        )
        result = terminal_result(record, state, StageError(stage=stage, type=state.value, message=message))
        if store.finalize(result):
            backend_pool().release(job_id)
        return

    if stage == "run" and _stale_run(record):
        # A run message of an earlier init: the job was started again from init elsewhere (its node was
        # cut off or died) and its sandbox is now on record.node. Hand the stage to that node.
        retries = store.release(job_id, token, False)
        if retries:
            resend(store, job_id, "run", retries, record.node or "")
        return

    attempt = Attempt(store, record, stage, token)
    monitor = job_monitor()
    monitor.enter(job_id, token, hostname, granted_at)
    try:
        try:
            handler = get_handler(record.spec.handler)
            ctx = _context(record, handler, stage, lambda: monitor.interruption(job_id), attempt)
        except Exception as exc:  # unknown handler after a deploy, instance no longer valid, ...
            attempt.finish(terminal_result(record, JobState.failed, StageError.of(stage, exc)))
            return
        span = {"farm.job_id": job_id, "farm.handler": record.spec.handler, "farm.node": owner}
        with tracing.stage_span(record.spec.traceparent, stage, span):
            _run_stage(attempt, handler, ctx)
    finally:
        monitor.leave(job_id, token)


def _stale_run(record: JobRecord) -> bool:
    """Whether this node may not run the job's run stage: its handler's run needs what init made, and
    init made it on another node (or is to be made again: no node recorded)."""
    try:
        node_local = get_handler(record.spec.handler).node_local
    except Exception:  # an unknown handler fails the job in the stage, with its reason
        return False
    return node_local and record.node != get_settings().node


@dataclass
class StageInputs:
    """What a stage starts from: what init made (filled in by init itself, so that a failure midway
    still tears down what exists) and, for eval, the run's output."""

    state: dict[str, Any] = field(default_factory=dict)
    run: RunOutput | None = None

    def captured(self) -> dict[str, Any]:
        """What a job interrupted during eval still returns: the run's traces and artifacts."""
        if self.run is None:
            return {}
        return {"trajectory": Trajectory(traces=self.run.traces), "artifacts": self.run.artifacts}


StageWork = Callable[["Attempt", AgentHandler, JobContext, StageInputs], "StageHandoff | JobResult"]


@dataclass(frozen=True)
class StageRule:
    """One row of the stage table: its work (a hook of the same shape for every stage; a failure goes
    to the handler's `<stage>_exception`) and whether the stage holds what init made (a failure tears
    it down)."""

    work: StageWork
    holds_sandbox: bool


def _init_work(attempt: Attempt, handler: AgentHandler, ctx: JobContext, inputs: StageInputs) -> StageHandoff:
    if handler.node_local:
        wait_for_ready_slot(attempt, ctx)
    inputs.state.update(handler.init(ctx))
    ctx.check()
    return StageHandoff(ctx.node, init_state=inputs.state)


def _run_work(
    attempt: Attempt, handler: AgentHandler, ctx: JobContext, inputs: StageInputs
) -> StageHandoff | JobResult:
    run = handler.run(ctx, inputs.state)
    _teardown_fenced(attempt, handler, ctx, inputs.state)
    if run.outcome == "completed":
        return StageHandoff(ctx.node, run_output=run.model_dump(mode="json"))
    kind = JobState.timeout if run.outcome == "timeout" else JobState.cancelled
    message = "budget spent during run" if kind is JobState.timeout else "cancelled during run"
    return terminal_result(
        ctx, kind, StageError(stage="run", type=kind.value, message=message),
        trajectory=Trajectory(traces=run.traces), artifacts=run.artifacts,
    )  # fmt: skip


def _eval_work(attempt: Attempt, handler: AgentHandler, ctx: JobContext, inputs: StageInputs) -> JobResult:
    run = inputs.run or RunOutput()
    result = handler.final_result(ctx, run, handler.eval(ctx, inputs.state, run))
    return result.model_copy(update={"timings": ctx.timings()})


STAGE_TABLE: dict[str, StageRule] = {
    "init": StageRule(_init_work, holds_sandbox=True),
    "run": StageRule(_run_work, holds_sandbox=True),
    "eval": StageRule(_eval_work, holds_sandbox=False),
}
"""init -> run -> eval. Every stage ends in one of four ways, the same for all: handed off (the next
stage enqueued with the outputs, atomically), finished (a terminal result), interrupted (cancelled,
budget spent, lease lost, worker draining) or failed (the handler's exception callback decides the
result)."""
INTERRUPTIONS = (JobCancelled, JobDeadlineExceeded, LeaseLost, WorkerDraining)
EXPECTED_FAILURES = (NoBackendAvailable, BackendUnavailable)
"""Failures of what is outside the worker (the inference backends), logged in one line."""


def _inputs(record: JobRecord, stage: str) -> StageInputs:
    if stage == "init":
        return StageInputs()
    run = RunOutput.model_validate(record.run_output or {}) if stage == "eval" else None
    return StageInputs(state=record.init_state or {}, run=run)


def _run_stage(attempt: Attempt, handler: AgentHandler, ctx: JobContext) -> None:
    rule = STAGE_TABLE[attempt.stage]
    inputs = _inputs(attempt.record, attempt.stage)
    try:
        outcome = rule.work(attempt, handler, ctx, inputs)
    except INTERRUPTIONS as exc:
        _interrupted(attempt, handler, ctx, exc, inputs.state if rule.holds_sandbox else None, inputs)
        return
    except Exception as exc:
        if isinstance(exc, EXPECTED_FAILURES):
            # the farm's own message says it all (which backends, what each answered): no traceback
            log.warning("%s of %s failed: %s: %s", attempt.stage, ctx.job_id, type(exc).__name__, exc)
        else:
            log.exception("%s of %s failed", attempt.stage, ctx.job_id)
        if rule.holds_sandbox:
            _teardown_fenced(attempt, handler, ctx, inputs.state)
        attempt.finish(_callback(handler, ctx, exc, inputs))
        return
    if isinstance(outcome, JobResult):
        attempt.finish(outcome)
    elif not attempt.end_stage(time.monotonic() - ctx.started, outcome):
        log.warning("%s of %s finished after its lease was lost; discarding", attempt.stage, ctx.job_id)


def _interrupted(
    attempt: Attempt,
    handler: AgentHandler,
    ctx: JobContext,
    exc: Exception,
    state: dict[str, Any] | None,
    inputs: StageInputs,
) -> None:
    """Cancellation, a spent budget, a lost lease or a draining worker, in any stage."""
    if isinstance(exc, LeaseLost):
        # Another attempt owns the job now (and what init made): touch nothing.
        log.warning("%s", exc)
        return
    if state is not None:
        _teardown_fenced(attempt, handler, ctx, state)
    if isinstance(exc, WorkerDraining):
        resume_stages(attempt, restart_from_init=state is not None and attempt.stage == "run")
        return
    kind = JobState.cancelled if isinstance(exc, JobCancelled) else JobState.timeout
    error = StageError(stage=attempt.stage, type=kind.value, message=str(exc))
    attempt.finish(terminal_result(ctx, kind, error, **inputs.captured()))


def _callback(handler: AgentHandler, ctx: JobContext, exc: BaseException, inputs: StageInputs) -> JobResult:
    """The handler's exception callback; if that fails too, a plain failed result."""
    try:
        result = exception_hook(handler, ctx.stage)(ctx, exc, inputs.state, inputs.run)
        if isinstance(result, JobResult) and result.state.terminal:
            return result
        raise TypeError(f"{ctx.stage}_exception must return a terminal JobResult")
    except Exception:
        log.exception("exception callback of %s failed", ctx.job_id)
        return terminal_result(ctx, JobState.failed, StageError.of(ctx.stage, exc))


def _release_init_state(record: JobRecord) -> None:
    """A job that ends between init and run still owns what init made (workspace, sandbox)."""
    state = record.init_state
    if state is None:
        return
    try:
        handler = get_handler(record.spec.handler)
        _teardown_quietly(handler, _context(record, handler, "run", lambda: None), state)
    except Exception:
        log.exception("could not release what init made for %s", record.job_id)


def _teardown_fenced(attempt: Attempt, handler: AgentHandler, ctx: JobContext, state: dict[str, Any]) -> None:
    """Teardown is an end-of-stage write like any other: a stale attempt (its lease reaped, the stage
    retried) must not stop the sandbox or workspace the retry now uses. What a stale attempt made
    and nobody uses any more is the orphan sweep's (tasks/orphans.py). A handler with no teardown
    has nothing to fence (and saves the lease check's Redis round trip)."""
    if type(handler).teardown is AgentHandler.teardown:
        return
    if not attempt.holds_lease():
        log.warning(
            "%s of %s lost its lease; leaving its sandbox to the attempt holding it",
            attempt.stage,
            ctx.job_id,
        )
        return
    _teardown_quietly(handler, ctx, state)


def _teardown_quietly(handler: AgentHandler, ctx: JobContext, state: dict[str, Any]) -> None:
    try:
        handler.teardown(ctx, state)
    except Exception:
        log.exception("teardown of %s failed", ctx.job_id)
