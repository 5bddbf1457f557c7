"""Traces carry the request metadata (group_id above all), as farm/models/requests.py promises, so
trainers that only see traces still form GRPO groups."""

from __future__ import annotations

from types import SimpleNamespace

from farm.adapters import flatten
from farm.handler.protocol import AgentHandler, EvalOutput, RunOutput
from tests.trainers import farm_rollouts


def test_every_trace_carries_the_request_metadata() -> None:
    for result in farm_rollouts.results():
        for trace in result.trajectory.traces:
            assert trace.metadata["group_id"] == result.metadata["group_id"]
            assert trace.metadata["policy_version"] == 3
            assert trace.metadata["job_id"] == result.job_id  # the trace's own keys stay


def test_bare_traces_group_by_prompt() -> None:
    samples = flatten(farm_rollouts.traces())
    assert {s.group_id for s in samples} == {"g-a", "g-b"}
    assert len({s.group_index for s in samples}) == 2
    assert len({s.trajectory_index for s in samples}) == 6  # a job's two traces are one trajectory


def test_task_jobs_default_their_group_to_the_task() -> None:
    conv, finish = farm_rollouts.episode("q")
    ctx = farm_rollouts.context("t1-0", {"policy_version": 1}, task_id="t1")
    run = RunOutput(traces=[conv.to_trace(finish, {"job_id": "t1-0"})])
    result = AgentHandler.final_result(SimpleNamespace(name="x"), ctx, run, EvalOutput(reward=1.0))  # type: ignore[arg-type]
    assert result.trajectory.traces[0].metadata["group_id"] == "t1"
    ctx = farm_rollouts.context("t1-1", {"group_id": "mine"}, task_id="t1")
    result = AgentHandler.final_result(SimpleNamespace(name="x"), ctx, run, EvalOutput(reward=1.0))  # type: ignore[arg-type]
    assert result.trajectory.traces[0].metadata["group_id"] == "mine"
