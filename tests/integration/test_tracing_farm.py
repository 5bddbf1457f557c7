"""A rollout's trace reaches an OTLP receiver started by the test, from a real farm (API, Celery workers in
their own processes, reference LLM, sandboxed python tool): the API's root span, one span per stage from
the workers joined through the job record, the LLM calls and the tool calls under the run stage; the
trace id is on the job's result. A black-box harness's model calls, served by the API's gateway, join the
same trace under the run stage (its span context travels in the gateway session's metadata)."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import httpx
import pytest

from farm.launcher import LocalFarm
from farm.models.results import JobState
from tests.farms import stage_workers, temp_farm
from tests.integration.jobs import submit, wait_state

pytest.importorskip(
    "opentelemetry.proto", reason="the otel extra is not installed (pip install -e '.[otel]')"
)

from tests.otlp_receiver import Receiver, otlp_receiver
from tests.waiting import wait_until

pytestmark = pytest.mark.slow  # a farm of its own (its processes export to this test's receiver)

PROBLEM = {"handler": "math", "question": "What is 84 * 76 + 123?", "answer": "6507"}
# handlers/harness/scripts/harness.jsonl: the scripted policy's answer to this instruction.
HARNESS_INSTRUCTION = "Greet the rollout farm from a shell harness."
# An unchanged third-party harness as far as the farm knows: plain HTTP to OPENAI_BASE_URL, twice.
HARNESS_AGENT = """\
import json, os, urllib.request

for _ in range(2):
    request = urllib.request.Request(
        os.environ["OPENAI_BASE_URL"].rstrip("/") + "/chat/completions",
        data=json.dumps({
            "model": os.environ["OPENAI_MODEL"],
            "messages": [{"role": "user", "content": os.environ["FARM_INSTRUCTION"]}],
        }).encode(),
        headers={
            "content-type": "application/json",
            "authorization": "Bearer " + os.environ["OPENAI_API_KEY"],
        },
    )
    with urllib.request.urlopen(request) as answer:
        print(json.load(answer)["choices"][0]["message"]["content"], flush=True)
"""


@pytest.fixture(scope="module")
def traced() -> Iterator[tuple[LocalFarm, Receiver]]:
    with otlp_receiver() as receiver:
        local = temp_farm(
            "farm-otel-",
            workers=stage_workers(1, 2, 1),
            env={"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url, "OTEL_BSP_SCHEDULE_DELAY": "200"},
        )
        with local.start(timeout_s=120):
            yield local, receiver


def test_a_rollout_trace_with_its_spans_reaches_the_receiver(traced: tuple[LocalFarm, Receiver]) -> None:
    farm, receiver = traced
    with httpx.Client(base_url=farm.api_url, timeout=60) as api:
        job = submit(api, PROBLEM, sampling_params={"max_tokens": 256})
        result = wait_state(api, job, {"done", "failed", "timeout", "cancelled"}, timeout_s=120)
    assert result.state is JobState.done, result.error
    trace_id = result.metadata["trace_id"]
    assert len(trace_id) == 32 and result.trajectory.traces[0].metadata["trace_id"] == trace_id

    def complete() -> bool:
        names = [s.name for s in receiver.trace(trace_id)]
        return {"rollout", "stage init", "stage run", "stage eval", "llm.generate", "tool.call"} <= set(names)

    wait_until(complete, 30, what="the rollout's spans at the receiver", interval_s=0.1)
    spans = receiver.trace(trace_id)
    [root] = [s for s in spans if s.name == "rollout"]
    stages = {s.name: s for s in spans if s.name.startswith("stage ")}
    assert root.parent_span_id == "" and root.attributes["farm.job_id"] == job
    assert all(
        s.parent_span_id == root.span_id and s.attributes["farm.job_id"] == job for s in stages.values()
    )
    run = stages["stage run"]
    calls = [s for s in spans if s.name in ("llm.generate", "tool.call")]
    assert calls and all(s.parent_span_id == run.span_id for s in calls)
    llm = next(s for s in calls if s.name == "llm.generate")
    assert llm.attributes["farm.llm.backend"] in {u.rstrip("/") for u in farm.llm_urls}
    assert llm.attributes["farm.llm.prompt_tokens"] > 0 and llm.attributes["farm.llm.completion_tokens"] > 0
    assert next(s for s in calls if s.name == "tool.call").attributes["farm.tool.name"] == "python"
    assert not any(s.error for s in spans)


def test_a_harness_model_calls_through_the_gateway_join_the_rollout_trace(
    traced: tuple[LocalFarm, Receiver],
) -> None:
    farm, receiver = traced
    body = {
        "task_id": f"traced-harness-{uuid.uuid4().hex[:8]}",
        "instruction": HARNESS_INSTRUCTION,
        "timeout_seconds": 120,
        "runtime": {"prepare": [{"write": "agent.py", "content": HARNESS_AGENT}]},
        "agent": {"harness": "shell", "command": "python agent.py"},
    }
    with httpx.Client(base_url=farm.api_url, timeout=60) as api:
        response = api.post("/rollout/task/submit", json=body)
        assert response.status_code == 200, response.text
        [job] = response.json()["session_ids"]
        result = wait_state(api, job, {"done", "failed", "timeout", "cancelled"}, timeout_s=120)
    assert result.state is JobState.done, result.error
    assert result.artifacts["completion_count"] == 2
    trace_id = result.metadata["trace_id"]
    assert all("traceparent" not in t.metadata for t in result.trajectory.traces)  # it steers, not describes

    def complete() -> bool:
        names = [s.name for s in receiver.trace(trace_id)]
        return {"rollout", "stage run", "stage eval"} <= set(names) and names.count("gateway.call") == 2

    wait_until(complete, 30, what="the harness rollout's spans at the receiver", interval_s=0.1)
    spans = receiver.trace(trace_id)
    [run] = [s for s in spans if s.name == "stage run"]
    calls = [s for s in spans if s.name == "gateway.call"]
    assert all(s.parent_span_id == run.span_id for s in calls)
    for span in calls:
        assert span.attributes["farm.gateway.provider"] == "openai_chat"
        assert span.attributes["farm.gateway.status"] == "ok"
        assert span.attributes["farm.llm.backend"] in {u.rstrip("/") for u in farm.llm_urls}
        assert span.attributes["farm.llm.prompt_tokens"] > 0
        assert span.attributes["farm.llm.completion_tokens"] > 0
        assert "farm.policy_version_source" in span.attributes
    assert not any(s.error for s in spans)
