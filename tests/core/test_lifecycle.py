"""The stage lifecycle (tasks/lifecycle.py) in-process against a real redis-server: execute_stage is
called directly, as a worker's task would, with no Celery worker and no sleeps. Each test pins one exit
of the stage table: handed off, finished, failed (handler callback, or a plain failure when the callback
breaks too), interrupted (cancelled, budget spent, lease lost, worker draining)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Literal

import pytest
import redis

from farm import keys
from farm.errors import JobCancelled, JobDeadlineExceeded, LeaseLost, WorkerDraining
from farm.handler.context import JobContext
from farm.handler.protocol import AgentHandler, EvalOutput, HandlerInstance, RunOutput
from farm.handler.registry import register
from farm.jobs.dispatch import stage_task_id
from farm.jobs.spec import JobSpec
from farm.models.results import JobResult, JobState, Trace
from farm.settings import get_settings

Stage = Literal["init", "run", "eval"]
INTERRUPTS: dict[str, type[Exception]] = {
    "cancel": JobCancelled,
    "deadline": JobDeadlineExceeded,
    "lost": LeaseLost,
    "drain": WorkerDraining,
}
calls: list[tuple[str, str]] = []
"""(job id, event) in the order the probe handler saw them."""


class ProbeInstance(HandlerInstance):
    fail: Stage | None = None
    interrupt: tuple[Stage, str] | None = None
    broken_callback: bool = False
    run_outcome: Literal["completed", "timeout", "cancelled"] = "completed"


class ProbeHandler(AgentHandler[ProbeInstance]):
    name = "lifecycle_probe"
    instance_model = ProbeInstance
    node_local = False

    def _step(self, ctx: JobContext[ProbeInstance], stage: Stage) -> None:
        calls.append((ctx.job_id, stage))
        inst = ctx.instance
        if inst.fail == stage:
            raise ValueError(f"{stage} broke")
        if inst.interrupt and inst.interrupt[0] == stage:
            raise INTERRUPTS[inst.interrupt[1]](f"{inst.interrupt[1]} in {stage}")

    def init(self, ctx: JobContext[ProbeInstance]) -> dict[str, Any]:
        self._step(ctx, "init")
        return {"sandbox": ctx.job_id}

    def run(self, ctx: JobContext[ProbeInstance], state: dict[str, Any]) -> RunOutput:
        assert state == {"sandbox": ctx.job_id}
        self._step(ctx, "run")
        trace = Trace(prompt_ids=[1], response_ids=[2], response_logprobs=[-0.1], loss_mask=[1])
        outcome = ctx.instance.run_outcome
        return RunOutput(traces=[trace], outcome=outcome)

    def eval(self, ctx: JobContext, state: dict[str, Any], run: RunOutput) -> EvalOutput:
        assert len(run.traces) == 1
        self._step(ctx, "eval")
        return EvalOutput(reward=0.75)

    def teardown(self, ctx: JobContext, state: dict[str, Any]) -> None:
        calls.append((ctx.job_id, f"teardown {sorted(state)}"))

    def run_exception(
        self, ctx: JobContext[ProbeInstance], exc: BaseException, state: dict[str, Any], run: RunOutput | None
    ) -> JobResult:
        if ctx.instance.broken_callback:
            raise RuntimeError("the callback broke too")
        calls.append((ctx.job_id, f"run_exception {state} {run}"))
        return super().run_exception(ctx, exc, state, run)


class OldCallbacksHandler(ProbeHandler):
    """A handler written to the exception callbacks' signatures from before they shared one."""

    name = "lifecycle_old_callbacks"

    def init_exception(self, ctx: JobContext, exc: BaseException) -> JobResult:
        calls.append((ctx.job_id, "old init_exception"))
        return self.failed_result(ctx, "init", exc)

    def run_exception(self, ctx: JobContext, exc: BaseException, state: dict[str, Any]) -> JobResult:
        calls.append((ctx.job_id, f"old run_exception {state}"))
        return self.failed_result(ctx, "run", exc)

    def eval_exception(self, ctx: JobContext, exc: BaseException, run: RunOutput) -> JobResult:
        calls.append((ctx.job_id, f"old eval_exception {len(run.traces)} traces"))
        return self.failed_result(ctx, "eval", exc)


with pytest.deprecated_call(match="use the rollout_farm.handlers entry point"):
    register(ProbeHandler)  # classes of a test module have no entry point: the deprecated door still works
    register(OldCallbacksHandler)


@pytest.fixture
def farm(redis_url: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """The worker's process-wide services pointed at the test's Redis."""
    import tasks.monitor
    import tasks.services
    from tasks import lifecycle

    monkeypatch.setenv("FARM_REDIS_URL", redis_url)
    monkeypatch.setenv("FARM_WORKDIR", str(tmp_path))
    services = [tasks.services.redis_client, tasks.services.job_store, tasks.services.backend_pool]

    def reset() -> None:
        get_settings.cache_clear()
        for service in services:
            service.cache_clear()
        tasks.monitor._monitor = None

    reset()
    calls.clear()
    yield lifecycle
    reset()  # the old monitor's daemon thread idles on with no leases to watch


def submit(job_id: str, handler: str = "lifecycle_probe", **instance: Any) -> None:
    from tasks.services import job_store, stage_messages

    spec = JobSpec(
        job_id=job_id,
        handler=handler,
        instance={"handler": handler, **instance},
        timeout_s=60,
    )
    message = stage_messages().build(job_id, "init", stage_task_id(job_id, "init"), "init")
    assert job_store().create(spec, {}, message)


def result(job_id: str) -> JobResult:
    from tasks.services import job_store

    record = job_store().get(job_id)
    assert record is not None and record.result is not None, "the job has not ended"
    return record.result


def drive(lifecycle: Any, job_id: str, stages: tuple[Stage, ...] = ("init", "run", "eval")) -> None:
    for stage in stages:
        lifecycle.execute_stage(job_id, stage, "w1")


def test_a_job_hands_off_through_every_stage_and_keeps_its_data_once(farm: Any) -> None:
    submit("ok")
    drive(farm, "ok")
    done = result("ok")
    assert done.state is JobState.done and done.reward == 0.75, done.error
    assert [event for _, event in calls] == ["init", "run", "teardown ['sandbox']", "eval"]
    stored = redis.Redis.from_url(get_settings().redis_url, decode_responses=True).hgetall(keys.job("ok"))
    assert not stored["init_state"] and not stored["run_output"]  # emptied: the result holds them
    assert stored["done:init"] == stored["done:run"] == "1"


def test_a_redelivered_stage_that_finished_does_nothing(farm: Any) -> None:
    submit("twice")
    drive(farm, "twice", ("init", "init", "run", "run"))
    assert [event for _, event in calls] == ["init", "run", "teardown ['sandbox']"]


@pytest.mark.parametrize("stage", ["init", "run", "eval"])
def test_a_failing_stage_ends_failed_and_releases_what_init_made(farm: Any, stage: Stage) -> None:
    submit("broke", fail=stage)
    drive(farm, "broke")
    failed = result("broke")
    assert failed.state is JobState.failed
    assert failed.error is not None and (failed.error.stage, failed.error.type) == (stage, "ValueError")
    events = [event for _, event in calls]
    assert events.count("teardown ['sandbox']") == (stage != "init")  # init failed before making it
    if stage == "run":
        assert "run_exception {'sandbox': 'broke'} None" in events  # the handler's callback decided
    if stage == "eval":
        assert failed.trajectory is not None and len(failed.trajectory.traces) == 1


@pytest.mark.parametrize(
    ("stage", "event"),
    [
        ("init", "old init_exception"),
        ("run", "old run_exception {'sandbox': 'broke'}"),
        ("eval", "old eval_exception 1 traces"),
    ],
)
def test_exception_callbacks_of_the_old_signatures_still_decide_with_a_warning(
    farm: Any, stage: Stage, event: str
) -> None:
    submit("broke", "lifecycle_old_callbacks", fail=stage)
    with pytest.deprecated_call(match=f"OldCallbacksHandler.{stage}_exception takes the old arguments"):
        drive(farm, "broke")
    failed = result("broke")
    assert failed.state is JobState.failed
    assert failed.error is not None and (failed.error.stage, failed.error.type) == (stage, "ValueError")
    assert ("broke", event) in calls


def test_a_broken_exception_callback_still_gives_a_well_formed_failure(farm: Any) -> None:
    submit("worse", fail="run", broken_callback=True)
    drive(farm, "worse")
    failed = result("worse")
    assert failed.state is JobState.failed and failed.error is not None
    assert (failed.error.stage, failed.error.type, failed.error.message) == ("run", "ValueError", "run broke")


@pytest.mark.parametrize(
    ("stage", "kind", "state"),
    [
        ("init", "cancel", JobState.cancelled),
        ("run", "deadline", JobState.timeout),
        ("eval", "cancel", JobState.cancelled),
    ],
)
def test_an_interrupted_stage_ends_with_what_was_captured(
    farm: Any, stage: Stage, kind: str, state: JobState
) -> None:
    submit("stop", interrupt=(stage, kind))
    drive(farm, "stop")
    ended = result("stop")
    assert ended.state is state and ended.error is not None and ended.error.stage == stage
    captured = ended.trajectory.traces if ended.trajectory else []
    assert len(captured) == (stage == "eval")  # eval keeps the run's traces


@pytest.mark.parametrize("outcome", ["timeout", "cancelled"])
def test_a_run_that_reports_an_interruption_ends_with_its_partial_traces(farm: Any, outcome: str) -> None:
    submit("partial", run_outcome=outcome)
    drive(farm, "partial", ("init", "run"))
    ended = result("partial")
    assert ended.state.value == outcome and ended.trajectory is not None
    assert len(ended.trajectory.traces) == 1
    assert ("partial", "teardown ['sandbox']") in calls


def test_a_stage_that_lost_its_lease_touches_nothing(farm: Any) -> None:
    from tasks.services import job_store

    submit("lost", interrupt=("run", "lost"))
    drive(farm, "lost", ("init", "run"))
    record = job_store().get("lost")
    assert record is not None and not record.state.terminal
    assert [event for _, event in calls] == ["init", "run"]  # no teardown: the new attempt owns it


def test_a_draining_worker_gives_the_stage_back_to_start_over(farm: Any) -> None:
    from tasks.services import job_store

    submit("drained", interrupt=("run", "drain"))
    drive(farm, "drained", ("init", "run"))
    record = job_store().get("drained")
    assert record is not None and not record.state.terminal
    assert record.fields["infra_retries"] == "1" and not record.stage_done("init")  # init again
    assert ("drained", "teardown ['sandbox']") in calls


def test_a_cancelled_job_ends_at_the_next_stage_door(farm: Any) -> None:
    from tasks.services import job_store

    submit("revoked")
    farm.execute_stage("revoked", "init", "w1")
    job_store().revoke("revoked")
    farm.execute_stage("revoked", "run", "w1")
    ended = result("revoked")
    assert ended.state is JobState.cancelled and ended.error is not None and ended.error.stage == "run"
    assert ("revoked", "teardown ['sandbox']") in calls  # what init made is released
