"""A real published harness CLI, unchanged: pi (@mariozechner/pi-coding-agent) is installed from the npm
registry into a cache directory the sandbox can see, then a task submitted over HTTP runs it in a
sandbox through the gateway against the session farm's scripted reference policy. pi reads calc.py,
fixes it with its own `edit` tool, runs the test with its `bash` tool; the farm returns the patch, the
reward of the repository's test run in a fresh runtime, and prefix-merged traces.

Skipped only when node/npm are missing or the npm registry cannot be reached. The cache is
$FARM_HARNESS_CLI_CACHE, else ~/.cache/rollout-farm/harness-cli (never under /tmp, which sandboxes do not
see)."""

from __future__ import annotations

import subprocess
import uuid
from typing import Any

import httpx
import pytest

from farm.models.results import JobResult, JobState
from handlers.harness.clis import HARNESS_CLIS, CliUnavailable, cli_cache, install_cli
from tests.integration.test_harness_shell import submit_task, wait_task

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PI_VERSION = HARNESS_CLIS["pi"].version
INSTRUCTION = "Fix the add function in calc.py so that test_calc.py passes."  # scripts/harness.jsonl
CALC = "def add(a, b):\n    return a - b\n"
TEST = 'from calc import add\n\nassert add(2, 3) == 5, f"add(2, 3) = {add(2, 3)}"\nprint("ok")\n'


def fix_calc(
    api: httpx.Client, task: str, harness: str, binary: str, timeout_s: int, **body: Any
) -> JobResult:
    """Task `task`: `harness` (its CLI at `binary`) fixes calc.py in a fresh git repository, within
    `timeout_s`; the reward is test_calc.py run on its patch in a fresh runtime. Its session's result."""
    submit_task(
        api,
        task_id=task,
        instruction=INSTRUCTION,
        timeout_seconds=timeout_s,
        runtime={
            "prepare": [
                {"write": "calc.py", "content": CALC},
                {"write": "test_calc.py", "content": TEST},
                {"git_init": True},
            ]
        },
        agent={"harness": harness, "command": binary},
        builder={"strategy": "prefix_merging"},
        evaluator={
            "strategy": "test_on_output",
            "config": {"command": "python3 test_calc.py", "fresh": True},
        },
        **body,
    )
    return wait_task(api, task, timeout_s=timeout_s - 10)


@pytest.fixture(scope="module")
def pi_bin() -> str:
    assert not str(cli_cache().resolve()).startswith("/tmp/"), (
        "sandboxes cannot see /tmp: set FARM_HARNESS_CLI_CACHE"
    )
    try:
        binary = install_cli(HARNESS_CLIS["pi"])
    except CliUnavailable as exc:
        pytest.skip(str(exc))
    version = subprocess.run([str(binary), "--version"], capture_output=True, text=True, timeout=60)
    assert version.returncode == 0 and PI_VERSION in version.stdout + version.stderr, version
    return str(binary)


def test_pi_fixes_a_repository_through_the_gateway(api: httpx.Client, pi_bin: str) -> None:
    task = f"pi-fix-{uuid.uuid4().hex[:8]}"
    result = fix_calc(api, task, "pi", pi_bin, 180, instance={"context_window": 8192})
    assert result.state is JobState.done, (result.error, result.artifacts)
    artifacts = result.artifacts
    assert artifacts["exit_code"] == 0, artifacts["stderr_tail"]
    assert "test_calc.py passes" in artifacts["output_tail"]

    # the patch: pi's edit, nothing else (no __pycache__ from its test run)
    patch = artifacts["patch"]
    assert patch.startswith("diff --git a/calc.py b/calc.py")
    assert "-    return a - b\n+    return a + b\n" in patch and patch.count("diff --git") == 1

    # the reward: the repository's test, in a fresh runtime prepared while pi ran, given only the patch
    test = artifacts["test"]
    assert test["passed"] is True and test["fresh"] is True and test["output"] == "ok", test
    assert result.reward == 1.0 and result.metadata["evaluator"] == "test_on_output"

    # what pi sent: OpenAI chat completions, streamed, its system prompt and its own four tools
    session = artifacts["gateway_session_id"]
    completions = api.get(f"/gateway/sessions/{session}/completions").json()
    assert artifacts["completion_count"] == len(completions) == 4
    first = completions[0]
    assert first["provider"] == "openai_chat" and first["metadata"]["stream"] is True
    assert first["request_messages"][0]["role"] == "system"
    assert "pi" in first["request_messages"][0]["content"]
    assert {tool["function"]["name"] for tool in first["tools"]} == {"read", "bash", "edit", "write"}
    called = [c["response_message"]["tool_calls"][0]["function"]["name"] for c in completions[:3]]
    assert called == ["read", "edit", "bash"]
    tool_results = [m for m in completions[-1]["request_messages"] if m["role"] == "tool"]
    assert [str(m["content"]).strip() for m in tool_results][-1] == "ok"  # pi ran the test itself
    print(f"\npi's first request: {first['usage']['prompt_tokens']} prompt tokens")

    # the trajectory: one merged chain, every sampled token trainable with its logprob, in order
    [trace] = result.trajectory.traces
    meta = trace.metadata
    assert meta["builder"] == "prefix_merging" and meta["harness"] == "pi"
    assert meta["completion_ids"] == [c["completion_id"] for c in completions]
    assert trace.prompt_ids == first["prompt_ids"]
    assert len(trace.response_ids) == len(trace.loss_mask) == len(trace.response_logprobs)
    assert sum(trace.loss_mask) == sum(len(c["response_ids"]) for c in completions)
    for segment, completion in zip(meta["segments"], completions, strict=True):
        span = slice(segment["start"], segment["start"] + segment["length"])
        assert trace.response_ids[span] == completion["response_ids"]
        assert trace.response_logprobs[span] == completion["response_logprobs"]
        assert set(trace.loss_mask[span]) == {1}
    assert trace.reward == 1.0
