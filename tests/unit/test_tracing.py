"""farm/tracing.py exports over OTLP/HTTP to a receiver started by the test: a process with the standard
OTEL_* setting emits a rollout's root span, a stage span joined through the stored traceparent, and an LLM
and a tool call under it; without the setting it emits nothing. (Each process under test is a real child
process: tracing is set up once per process.)"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("opentelemetry.sdk", reason="the otel extra is not installed (pip install -e '.[otel]')")
pytest.importorskip(
    "opentelemetry.proto", reason="opentelemetry-proto (with the otel extra) is not installed"
)

from tests.otlp_receiver import otlp_receiver
from tests.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]
SCRIPT = """
import sys
from farm import tracing
from farm.agent.tools import FunctionTool

opened = tracing.start_rollout("job-1", {"farm.handler": "math"})
if opened is None:
    print("off"); sys.exit(0)
_, traceparent, trace_id = opened
tracing.end_rollout(opened)
tool = FunctionTool("echo", "echo", {"type": "object", "properties": {}}, lambda args: "hello")
with tracing.stage_span(traceparent, "run", {"farm.job_id": "job-1"}):
    llm = {"farm.llm.backend": "http://b", "farm.policy_version": 3}
    with tracing.call_span("llm.generate", llm) as record:
        record(**{"farm.llm.completion_tokens": 7})
    tool({})
tracing.call_span("outside", {}).__enter__()  # no stage: no span
tracing.flush()
print(trace_id)
"""


def _run(env: dict[str, str], script: str = SCRIPT, *args: str) -> str:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "FARM_OTEL"))}
    done = subprocess.run(
        [sys.executable, "-c", script, *args],
        env={**base, "PYTHONPATH": str(REPO), **env},
        capture_output=True,
        text=True,
        timeout=60,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_spans_of_a_rollout_reach_an_otlp_receiver_over_http() -> None:
    with otlp_receiver() as receiver:
        trace_id = _run({"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url, "OTEL_SERVICE_NAME": "farm-test"})
        wait_until(lambda: len(receiver.trace(trace_id)) >= 4, 10, what="four spans")
        spans = {s.name: s for s in receiver.trace(trace_id)}
    assert set(spans) == {"rollout", "stage run", "llm.generate", "tool.call"}
    assert spans["rollout"].parent_span_id == "" and spans["rollout"].service == "farm-test"
    assert spans["stage run"].parent_span_id == spans["rollout"].span_id
    assert spans["llm.generate"].parent_span_id == spans["stage run"].span_id
    assert spans["tool.call"].parent_span_id == spans["stage run"].span_id
    assert spans["llm.generate"].attributes["farm.policy_version"] == 3
    assert spans["llm.generate"].attributes["farm.llm.completion_tokens"] == 7
    assert spans["tool.call"].attributes == {"farm.tool.name": "echo", "farm.tool.observation_chars": 5}


def test_tracing_is_off_unless_configured() -> None:
    assert _run({}) == "off"
    with otlp_receiver() as receiver:
        assert _run({"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url, "OTEL_SDK_DISABLED": "true"}) == "off"
        assert _run({"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url, "FARM_OTEL": "0"}) == "off"


# A harness's run stage (one process) hands its span context to the gateway (another) in the session's
# metadata; the gateway reports each served call from its record, a failure marked as an error.
STAGE_SCRIPT = """
from farm import tracing

opened = tracing.start_rollout("job-2", {"farm.handler": "harness"})
tracing.end_rollout(opened)
assert tracing.current_traceparent() is None  # no stage: nothing to hand over
with tracing.stage_span(opened[1], "run", {"farm.job_id": "job-2"}):
    print(opened[2], tracing.current_traceparent())
tracing.flush()
"""
GATEWAY_SCRIPT = """
import sys, time
from farm import tracing
from farm.builders.records import CallFailure, CompletionRecord, CompletionTimings
from farm.gateway.call_spans import trace_call
from farm.gateway.sessions import SessionInfo

now = time.time()
timings = CompletionTimings(started_at=now - 0.5, upstream_s=0.4, total_s=0.5)
untraced = SessionInfo(session_id="s0", created_at=now)
trace_call(untraced, CompletionRecord(completion_id="c0", session_id="s0", timings=timings))
assert "tracer" not in tracing._state  # a session without a traceparent never sets tracing up
info = SessionInfo(session_id="s1", created_at=now, metadata={"traceparent": sys.argv[1]})
served = CompletionRecord(
    completion_id="c1", session_id="s1", provider="anthropic", model="m", prompt_ids=[1, 2, 3],
    response_ids=[4, 5], backend="http://b", policy_version=4, policy_version_source="pool", timings=timings,
)
trace_call(info, served)
failure = CallFailure(error_class="upstream_timeout", status=504, message="no answer")
trace_call(info, CompletionRecord(completion_id="c2", session_id="s1", timings=timings, error=failure))
tracing.flush()
"""


def test_gateway_calls_join_the_trace_of_the_stage_that_opened_the_session() -> None:
    with otlp_receiver() as receiver:
        env = {"OTEL_EXPORTER_OTLP_ENDPOINT": receiver.url}
        trace_id, traceparent = _run(env, STAGE_SCRIPT).split()
        _run(env, GATEWAY_SCRIPT, traceparent)
        wait_until(lambda: len(receiver.trace(trace_id)) >= 4, 10, what="four spans")
        spans = receiver.trace(trace_id)
    [stage] = [s for s in spans if s.name == "stage run"]
    served, failed = sorted(
        (s for s in spans if s.name == "gateway.call"),
        key=lambda s: s.attributes["farm.gateway.completion_id"],
    )
    assert served.parent_span_id == failed.parent_span_id == stage.span_id
    assert not served.error and failed.error
    assert served.attributes["farm.gateway.provider"] == "anthropic"
    assert (
        served.attributes["farm.llm.prompt_tokens"] == 3
        and served.attributes["farm.llm.completion_tokens"] == 2
    )
    assert (
        served.attributes["farm.llm.backend"] == "http://b" and served.attributes["farm.policy_version"] == 4
    )
    assert failed.attributes["farm.gateway.status"] == "upstream_timeout"
    assert failed.attributes["farm.gateway.http_status"] == 504
