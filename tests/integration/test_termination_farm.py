"""Termination reasons and tool-call parse outcomes through the real API with real workers: each reason
produced by a job that hits it (the reference LLM's scripted policy, handlers/math/scripts/termination.jsonl),
on the result, every trace and the viewer; an unparsed call in Llama 3's syntax counted in /metrics and
shown by `farm report`; a required parser refused at the door (422) or in the run, naming both parsers.

`sandbox_limit` (a workspace past its disk cap) and `infrastructure_failure` (no backend) need a farm
of their own (slow); `evaluation_refused` is the evaluators' refusal (issue 34), mapped in
tests/unit/test_termination.py."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from farm.launcher import LocalFarm, WorkerSpec
from farm.models.failures import INFRASTRUCTURE_FAILURES
from farm.models.results import JobState
from farm.models.termination import TerminationReason
from farm.report.cli import report
from tests.farms import temp_farm
from tests.integration.jobs import submit, wait_state
from tests.integration.test_harness_shell import submit_greeting_agent, submit_task, task_id, wait_task

pytestmark = pytest.mark.integration
ENDED = {"done", "failed", "cancelled", "timeout"}
OVERSIZED = "Termination probe: a tool result too long to read"
LLAMA = "Termination probe: a call in Llama 3's syntax"
SLOW = "Termination probe: a slow tool"
DISK = "Termination probe: a workspace past its disk cap"
MATH = "What is 84 * 76 + 123?"


def math(question: str, answer: str = "42", **limits: object) -> dict[str, object]:
    return {"handler": "math", "question": question, "answer": answer, **limits}


CASES: dict[TerminationReason, tuple[dict[str, object], dict[str, object]]] = {
    TerminationReason.answer: (math(LLAMA), {}),
    TerminationReason.completed: ({"handler": "noop"}, {}),
    TerminationReason.max_turns: (math(MATH, "6507", max_turns=1), {}),
    TerminationReason.generation_limit: (math(MATH, "6507", max_generated_tokens=6), {}),
    TerminationReason.context_limit: (
        math("What is 2 + 2? " + "Think hard. " * 200, max_context_tokens=256),
        {},
    ),
    TerminationReason.oversized_tool_result: (math(OVERSIZED, max_tool_result_chars=1000), {}),
    TerminationReason.unparsed_tool_calls: (math(LLAMA, max_turns=1), {}),
    TerminationReason.timeout: ({"handler": "noop", "run_s": 5}, {"timeout_s": 0.3}),
    TerminationReason.error: ({"handler": "noop", "fail_stage": "run"}, {}),
    TerminationReason.parser_refused: (
        math(MATH, "6507"),
        {"metadata": {"required_tool_call_parser": "llama3"}},
    ),
}


def test_each_reason_is_produced_by_a_job_that_hits_it(api: httpx.Client, tmp_path: Path) -> None:
    jobs = {reason: submit(api, instance, **body) for reason, (instance, body) in CASES.items()}
    cancelled = submit(api, {"handler": "noop", "run_s": 30})
    wait_state(api, cancelled, {"run"})
    assert api.post("/cancel", json={"job_id": cancelled}).status_code == 200
    jobs[TerminationReason.cancelled] = cancelled
    # a harness (the `shell` one: a command, no model call) that fails, and one that kills its sandbox
    shell = {"harness": "shell", "command": "exit 3"}
    jobs[TerminationReason.agent_failed] = submit_task(api, task_id=task_id("agent-failed"), agent=shell)
    killer = {"harness": "shell", "command": "kill -9 $PPID; sleep 5"}  # $PPID: the execution server
    lost = submit_task(
        api, task_id=task_id("sandbox-lost"), agent=killer, evaluator={"strategy": "session_completed"}
    )
    jobs[TerminationReason.sandbox_lost] = lost
    results = {reason: wait_state(api, job, ENDED, timeout_s=60) for reason, job in jobs.items()}
    for reason, result in results.items():
        assert result.metadata.get("termination_reason") == reason.value, (reason, result.state, result.error)
        assert all(t.metadata["termination_reason"] == reason.value for t in result.trajectory.traces)
    # the trajectory is kept up to the offending turn
    oversized = results[TerminationReason.oversized_tool_result].trajectory.traces[0]
    assert oversized.response_messages[-1]["tool_calls"] and oversized.loss_mask[-1] == 1
    assert sum(results[TerminationReason.generation_limit].trajectory.traces[0].loss_mask) == 6
    refused = results[TerminationReason.parser_refused]
    assert refused.state is JobState.failed and refused.error is not None
    assert refused.error.type == "ToolCallParserRefused"
    assert "`llama3_json`" in refused.error.message and "`hermes`" in refused.error.message
    # the viewer names the reason
    page = api.get(f"/ui/jobs/{jobs[TerminationReason.max_turns]}")
    assert page.status_code == 200 and 'id="termination-reason">max_turns<' in page.text

    run = tmp_path / "run.jsonl"
    run.write_text("".join(r.model_dump_json() + "\n" for r in results.values()))
    shown = CliRunner().invoke(report, [str(run), "--no-plots"], terminal_width=200)
    assert shown.exit_code == 0, shown.output
    assert "Termination reasons" in shown.output and "oversized_tool_result" in shown.output


def test_an_unparsed_call_is_counted_and_shown(api: httpx.Client, tmp_path: Path) -> None:
    before = _unparsed_count(api)
    result = wait_state(api, submit(api, math(LLAMA)), ENDED, timeout_s=60)
    assert result.state is JobState.done, result.error
    turns = result.trajectory.traces[0].metadata["turn_parses"]
    assert [t["outcome"] for t in turns] == ["unparsed", "no_call"], turns
    assert turns[0]["parser"] == "hermes" and turns[0]["would_parse"] == ["llama3_json"]
    assert _unparsed_count(api) >= before + 1
    assert 'farm_tool_call_unparsed_rate{family="hermes",parser="hermes"}' in api.get("/metrics").text
    page = api.get(f"/ui/jobs/{result.job_id}").text
    assert "1: unparsed (llama3_json would read it)" in page

    run = tmp_path / "run.jsonl"
    run.write_text(result.model_dump_json() + "\n")
    shown = CliRunner().invoke(report, [str(run), "--no-plots"], terminal_width=200)
    assert shown.exit_code == 0, shown.output
    assert "unparsed rate 100.0%" in shown.output, shown.output
    as_json = json.loads(CliRunner().invoke(report, [str(run), "--no-plots", "--json"]).output)
    assert as_json["unparsed_rate"] == 1.0
    assert as_json["tool_call_parsing"][0]["outcomes"]["unparsed"] == 1


def test_a_required_parser_that_disagrees_with_the_named_one_is_a_422(api: httpx.Client) -> None:
    body = {
        "instance": math(MATH, "6507"),
        "metadata": {"tool_call_parser": "hermes", "required_tool_call_parser": "llama3_json"},
    }
    refused = api.post("/process", json=body)
    assert refused.status_code == 422
    assert "required_tool_call_parser" in refused.text and "hermes" in refused.text
    unknown = api.post("/process", json={**body, "metadata": {"required_tool_call_parser": "nope"}})
    assert unknown.status_code == 422 and "nope" in unknown.text


@pytest.mark.slow
def test_a_publish_past_the_lag_bound_ends_stale_policy(api: httpx.Client, farm: LocalFarm) -> None:
    for url in farm.llm_urls:
        api.post("/add_llm_server", json={"address": url, "policy_version": 100}).raise_for_status()
    try:
        job = submit(api, math(SLOW), metadata={"max_policy_lag": 0})
        wait_state(api, job, {"run"})
        time.sleep(2.0)  # the first turn is sampled; its tool sleeps 4 s
        for url in farm.llm_urls:
            api.post("/add_llm_server", json={"address": url, "policy_version": 101}).raise_for_status()
        result = wait_state(api, job, ENDED, timeout_s=60)
    finally:
        for url in farm.llm_urls:
            api.post("/add_llm_server", json={"address": url}).raise_for_status()
    assert result.state is JobState.cancelled
    assert result.metadata["termination_reason"] == "stale_policy", result.trajectory.traces[0].finish_reason


@pytest.fixture(scope="module")
def capped_farm() -> Iterator[LocalFarm]:
    """A farm whose sandboxes have a 16 MB workspace cap (FARM_SANDBOX_DISK_MB)."""
    local = temp_farm(
        "farm-termination-",
        workers=[WorkerSpec("init,run,eval", concurrency=4)],
        llm_args=["--accuracy", "1.0"],
        env={"FARM_SANDBOX_DISK_MB": "16"},
    )
    with local.start(timeout_s=90):
        yield local


@pytest.mark.slow
def test_a_sandbox_limit_and_an_infrastructure_failure_end_with_their_reasons(capped_farm: LocalFarm) -> None:
    with httpx.Client(base_url=capped_farm.api_url, timeout=60) as api:
        capped = wait_state(api, submit(api, math(DISK)), ENDED, timeout_s=90)
        assert capped.state is JobState.failed and capped.error is not None, capped
        assert capped.error.type == "SandboxLimitExceeded"
        assert capped.metadata["termination_reason"] == "sandbox_limit"
        api.post("/clear_llm_server").raise_for_status()
        try:
            lost = wait_state(
                api,
                submit(api, {"handler": "noop", "generate_tokens": 4}, timeout_s=1.5),
                ENDED,
                timeout_s=30,
            )
        finally:
            for url in capped_farm.llm_urls:
                api.post("/add_llm_server", json={"address": url}).raise_for_status()
        assert lost.state is JobState.failed and lost.error is not None
        assert lost.error.type in INFRASTRUCTURE_FAILURES, lost.error
        assert lost.metadata["termination_reason"] == "infrastructure_failure"


def test_a_gateway_call_is_counted_beside_the_agent_loops(api: httpx.Client) -> None:
    loop_before, gateway_before = _unparsed_count(api), _gateway_no_call_count(api)
    task = task_id("gateway-parse")
    submit_greeting_agent(api, task)
    result = wait_task(api, task, timeout_s=90)
    assert result.state is JobState.done, result.error
    assert [t["outcome"] for t in result.trajectory.traces[0].metadata["turn_parses"]] == ["no_call"]
    control = wait_state(api, submit(api, math(LLAMA)), ENDED, timeout_s=60)
    assert control.state is JobState.done, control.error
    assert _gateway_no_call_count(api) == gateway_before + 1, "the harness's one call, counted once"
    assert _unparsed_count(api) >= loop_before + 1, "the agent loop's turns still counted"
    api.get(f"/gateway/sessions/{result.artifacts['gateway_session_id']}/completions").raise_for_status()
    assert _gateway_no_call_count(api) == gateway_before + 1, "reading the log back counts nothing"


def _gateway_no_call_count(api: httpx.Client) -> float:
    return _metric(
        api, 'farm_tool_call_parse_outcomes_total{family="unknown",outcome="no_call",parser="backend"}'
    )


def _unparsed_count(api: httpx.Client) -> float:
    return _metric(
        api, 'farm_tool_call_parse_outcomes_total{family="hermes",outcome="unparsed",parser="hermes"}'
    )


def _metric(api: httpx.Client, prefix: str) -> float:
    for line in api.get("/metrics").text.splitlines():
        if line.startswith(prefix):
            return float(line.split()[-1])
    return 0.0
