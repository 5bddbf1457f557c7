"""One stage of one job, from start to the point where the chain moves on or the job ends.

Every exit path leaves the job either ready for its next stage or in exactly one terminal state
with a well-formed JobResult: handler errors go through the handler's exception callback,
cancellation and spent budgets end as `cancelled` / `timeout` with what was captured.
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from farm.agent.policy import PolicyClient
from farm.chat.tokenizer import ChatTokenizer
from farm.errors import JobCancelled, JobDeadlineExceeded
from farm.jobs.store import JobRecord, JobStore, terminal_result
from farm.models.results import JobResult, JobState, StageError, Trajectory
from farm.settings import get_settings
from handlers.base import AgentHandler, RunOutput
from handlers.context import JobContext
from handlers.registry import get_handler
from tasks.services import backend_pool, job_store

log = logging.getLogger(__name__)


class StageOutcome:
    """What the Celery task should do with its chain after the stage."""

    CONTINUE = "continue"
    STOP = "stop"


def _context(record: JobRecord, handler: AgentHandler, stage: str, store: JobStore) -> JobContext:
    settings = get_settings()
    timings = record.timings()
    remaining = record.spec.timeout_s - timings.in_stages
    started = time.monotonic()

    def policy_factory(ctx: JobContext) -> PolicyClient:
        return PolicyClient(backend_pool(), ctx.job_id, ctx.check, ctx.remaining)

    return JobContext(
        spec=record.spec,
        instance=handler.validate(record.spec.instance),
        stage=stage,
        node=settings.node,
        workdir=Path(settings.workdir) / "jobs" / record.job_id.replace("/", "_"),
        deadline=started + remaining,
        timings_before=timings,
        is_revoked=lambda: store.is_revoked(record.job_id),
        policy_factory=policy_factory,
        tokenizer_factory=lambda: ChatTokenizer.load(settings.tokenizer),
        started=started,
    )


def _finish(store: JobStore, result: JobResult) -> None:
    if store.finalize(result):
        backend_pool().release(result.job_id)
        log.info("job %s ended %s", result.job_id, result.state.value)


def _interrupted(ctx: JobContext, state: JobState, stage: str, message: str, **extra: Any) -> JobResult:
    return JobResult(
        job_id=ctx.job_id,
        state=state,
        handler=ctx.spec.handler,
        timings=ctx.timings(),
        error=StageError(stage=stage, type=state.value, message=message),
        metadata=ctx.metadata,
        **extra,
    )


def execute_stage(job_id: str, stage: str) -> str:
    store = job_store()
    verdict, record = store.begin_stage(job_id, stage)
    if verdict == "done":
        return StageOutcome.CONTINUE  # a redelivered stage that had already finished
    if verdict in ("missing", "terminal") or record is None:
        return StageOutcome.STOP
    if verdict in ("revoked", "expired"):
        if stage == "run":
            _release_init_state(record)
        state = JobState.cancelled if verdict == "revoked" else JobState.timeout
        message = (
            "cancelled before the stage started" if verdict == "revoked" else "budget spent before the stage"
        )
        _finish(
            store, terminal_result(record, state, StageError(stage=stage, type=state.value, message=message))
        )
        return StageOutcome.STOP

    try:
        handler = get_handler(record.spec.handler)
        ctx = _context(record, handler, stage, store)
    except Exception as exc:  # unknown handler after a deploy, instance no longer valid, ...
        _finish(
            store,
            terminal_result(
                record,
                JobState.failed,
                StageError(stage=stage, type=type(exc).__name__, message=str(exc)[:2000]),
            ),
        )
        return StageOutcome.STOP

    runner = {"init": _init, "run": _run, "eval": _eval}[stage]
    return runner(store, record, handler, ctx)


def _init(store: JobStore, record: JobRecord, handler: AgentHandler, ctx: JobContext) -> str:
    try:
        state = handler.init(ctx)
        ctx.check()
    except (JobCancelled, JobDeadlineExceeded) as exc:
        _teardown_quietly(handler, ctx, locals().get("state") or {})
        kind = JobState.cancelled if isinstance(exc, JobCancelled) else JobState.timeout
        _finish(store, _interrupted(ctx, kind, "init", str(exc)))
        return StageOutcome.STOP
    except Exception as exc:
        log.exception("init of %s failed", ctx.job_id)
        _teardown_quietly(handler, ctx, {})
        _finish(store, _callback(handler.init_exception, ctx, "init", exc))
        return StageOutcome.STOP
    store.end_stage(ctx.job_id, "init", time.monotonic() - ctx.started, {"node": ctx.node}, init_state=state)
    return StageOutcome.CONTINUE


def _run(store: JobStore, record: JobRecord, handler: AgentHandler, ctx: JobContext) -> str:
    state = record.output("init_state") or {}
    try:
        try:
            run = handler.run(ctx, state)
        finally:
            _teardown_quietly(handler, ctx, state)
    except (JobCancelled, JobDeadlineExceeded) as exc:
        kind = JobState.cancelled if isinstance(exc, JobCancelled) else JobState.timeout
        _finish(store, _interrupted(ctx, kind, "run", str(exc)))
        return StageOutcome.STOP
    except Exception as exc:
        log.exception("run of %s failed", ctx.job_id)
        _finish(store, _callback(handler.run_exception, ctx, "run", exc, state))
        return StageOutcome.STOP
    if run.outcome != "completed":
        kind = JobState.timeout if run.outcome == "timeout" else JobState.cancelled
        message = "budget spent during run" if kind is JobState.timeout else "cancelled during run"
        _finish(
            store,
            _interrupted(
                ctx,
                kind,
                "run",
                message,
                trajectory=Trajectory(traces=run.traces),
                artifacts=run.artifacts,
            ),
        )
        return StageOutcome.STOP
    store.end_stage(ctx.job_id, "run", time.monotonic() - ctx.started, run_output=run.model_dump(mode="json"))
    return StageOutcome.CONTINUE


def _eval(store: JobStore, record: JobRecord, handler: AgentHandler, ctx: JobContext) -> str:
    state = record.output("init_state") or {}
    run = RunOutput.model_validate(record.output("run_output") or {})
    try:
        evaluation = handler.eval(ctx, state, run)
        result = handler.final_result(ctx, run, evaluation)
    except (JobCancelled, JobDeadlineExceeded) as exc:
        kind = JobState.cancelled if isinstance(exc, JobCancelled) else JobState.timeout
        _finish(
            store,
            _interrupted(
                ctx, kind, "eval", str(exc), trajectory=Trajectory(traces=run.traces), artifacts=run.artifacts
            ),
        )
        return StageOutcome.STOP
    except Exception as exc:
        log.exception("eval of %s failed", ctx.job_id)
        _finish(store, _callback(handler.eval_exception, ctx, "eval", exc, run))
        return StageOutcome.STOP
    store.end_stage(ctx.job_id, "eval", time.monotonic() - ctx.started)
    _finish(store, result.model_copy(update={"timings": ctx.timings()}))
    return StageOutcome.STOP


def _callback(hook: Any, ctx: JobContext, stage: str, exc: BaseException, *args: Any) -> JobResult:
    """The handler's exception callback; if that fails too, a plain failed result."""
    try:
        result = hook(ctx, exc, *args)
        if isinstance(result, JobResult) and result.state.terminal:
            return result
        raise TypeError(f"{hook.__name__} must return a terminal JobResult")
    except Exception:
        log.exception("exception callback of %s failed", ctx.job_id)
        return JobResult(
            job_id=ctx.job_id,
            state=JobState.failed,
            handler=ctx.spec.handler,
            timings=ctx.timings(),
            error=StageError(stage=stage, type=type(exc).__name__, message=str(exc)[:2000]),
            metadata=ctx.metadata,
        )


def _release_init_state(record: JobRecord) -> None:
    """A job that ends between init and run still owns what init made (workspace, sandbox)."""
    state = record.output("init_state")
    if state is None:
        return
    try:
        handler = get_handler(record.spec.handler)
        _teardown_quietly(handler, _context(record, handler, "run", job_store()), state)
    except Exception:
        log.exception("could not release what init made for %s", record.job_id)


def _teardown_quietly(handler: AgentHandler, ctx: JobContext, state: dict[str, Any]) -> None:
    try:
        handler.teardown(ctx, state)
    except Exception:
        log.exception("teardown of %s failed", ctx.job_id)
