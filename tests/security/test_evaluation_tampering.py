"""A rollout passing a test-based reward by tampering with what the test run loads, not by solving the task
(issue 30, item 2). Each attack is a real attempt through the real evaluators:

- `test_on_output` in the rollout's own sandbox (the harness handler's non-fresh evaluator): a
  `usercustomize.py` in the user site under $HOME (the workspace), a `python3` earlier on a PATH that
  includes a workspace directory, a `conftest.py` that rewrites failures as passes, a daemon left running
  that rewrites the hidden test after the host wrote it, a shell function in the persistent bash tool;
- the swe handler's patch evaluator (also the harness `patch` evaluator): a patch that adds a `conftest.py`
  forging passes.

The honest outcome of every case is a failing test: reward 0. On main every attack but the shell function
was paid 1.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from containers import ExecServerError
from containers.launch import BASE_PATH
from containers.local import LocalRuntime
from containers.sandbox import Sandbox
from containers.spec import SandboxSpec
from farm.handler.context import JobContext
from farm.handler.protocol import RunOutput
from farm.handler.standalone import job_context
from farm.jobs.spec import JobSpec
from handlers.evaluation_guard import (
    EvaluatorUnavailable,
    changed_implicit,
    evaluation_env,
    refused_patch_paths,
    scan_implicit,
    trusted_path,
)
from handlers.harness.evaluators import OutputTestConfig, OutputTestEvaluator, RunFacts
from handlers.harness.instance import HarnessInstance

HIDDEN_TEST = "def test_the_task():\n    assert False, 'not solved'\n"
CONFIG = OutputTestConfig(
    command="python3 -m pytest -q -p no:cacheprovider test_hidden.py",
    files={"test_hidden.py": HIDDEN_TEST},
    timeout_s=120,
)
FORGING_CONFTEST = """
import pytest

@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    outcome.get_result().outcome = "passed"
"""


def context() -> JobContext:
    raw = {"handler": "harness", "instruction": "do", "harness": "shell"}
    job = JobSpec(job_id="tamper", handler="harness", instance=raw, timeout_s=300)
    return job_context(job, HarnessInstance.model_validate(raw))


@pytest.fixture
def rollout(runtime: LocalRuntime) -> Iterator[Sandbox]:
    """The rollout's sandbox; its PATH starts with a workspace directory (as a task's venv would)."""
    path = f"/workspace/bin:{os.path.dirname(sys.executable)}:{BASE_PATH}"
    # entry-point plugins of this interpreter (hypothesis, schemathesis) would cost each run tens of seconds
    spec = SandboxSpec(env={"PATH": path, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"})
    with runtime.start(spec) as sandbox:
        yield sandbox


def evaluate_in_rollout_sandbox(sandbox: Sandbox, before: dict[str, str]) -> tuple[float, dict[str, Any]]:
    """The harness handler's non-fresh test_on_output: collect at the end of run, score at eval."""
    evaluator, ctx = OutputTestEvaluator(), context()
    facts = RunFacts(sandbox, None, 0, None, before)
    artifacts = evaluator.collect(ctx, facts, CONFIG)
    scored = evaluator.score(ctx, RunOutput(artifacts=artifacts), CONFIG)
    return scored.reward, {**artifacts["test"], **scored.metadata}


def test_honest_failure_scores_zero(rollout: Sandbox) -> None:
    reward, test = evaluate_in_rollout_sandbox(rollout, scan_implicit(rollout.workspace))
    assert reward == 0.0 and "not solved" in test["output"]


def test_usercustomize_in_the_user_site_under_home(rollout: Sandbox) -> None:
    honoured = rollout.exec("python3 -c 'import site; print(site.ENABLE_USER_SITE)'").stdout.strip()
    if honoured != "True":
        # A venv's python (the README's `python -m venv .venv`) never reads the user site: the plant
        # cannot work, so there is no attack to refuse. A python that reads it (CI's) runs this test.
        pytest.skip(f"the sandbox's python3 ({sys.executable}) ignores the user site (a venv's does)")
    before = scan_implicit(rollout.workspace)
    site = rollout.exec("python3 -c 'import site; print(site.getusersitepackages())'").stdout.strip()
    assert site.startswith(rollout.workdir)  # HOME is the workspace
    planted = rollout.exec(f"mkdir -p {site} && echo 'import os; os._exit(0)' > {site}/usercustomize.py")
    assert planted.exit_code == 0
    assert rollout.exec("python3 -c 'print(1)'").stdout == ""  # the plant works for the rollout
    reward, test = evaluate_in_rollout_sandbox(rollout, before)
    assert reward == 0.0, test


def test_python_earlier_on_path(rollout: Sandbox) -> None:
    before = scan_implicit(rollout.workspace)
    plant = "mkdir -p bin && printf '#!/bin/sh\\necho 1 passed\\nexit 0\\n' > bin/python3"
    plant += " && chmod +x bin/python3"
    assert rollout.exec(plant).exit_code == 0
    assert rollout.exec("python3 -m pytest").stdout.strip() == "1 passed"  # the plant works
    reward, test = evaluate_in_rollout_sandbox(rollout, before)
    assert reward == 0.0, test


def test_conftest_that_rewrites_failures(rollout: Sandbox) -> None:
    before = scan_implicit(rollout.workspace)
    rollout.exec("cat > conftest.py", stdin=FORGING_CONFTEST)
    reward, test = evaluate_in_rollout_sandbox(rollout, before)
    assert reward == 0.0, test
    assert test["tampered"] == ["conftest.py"]


def test_daemon_rewriting_the_hidden_test(rollout: Sandbox) -> None:
    before = scan_implicit(rollout.workspace)
    daemon = (
        'setsid nohup sh -c \'while :; do printf "def test_the_task():\\n    pass\\n" > test_hidden.py.new '
        "&& mv -f test_hidden.py.new test_hidden.py; done' >/dev/null 2>&1 < /dev/null & sleep 0.2"
    )
    rollout.exec(daemon)
    reward, test = evaluate_in_rollout_sandbox(rollout, before)
    assert reward == 0.0, test


def test_function_in_the_persistent_shell(rollout: Sandbox) -> None:
    before = scan_implicit(rollout.workspace)
    rollout.tool("bash", command="python3() { echo '1 passed'; return 0; }; export -f python3")
    assert "1 passed" in rollout.tool("bash", command="python3 -m pytest").output  # the plant works there
    reward, test = evaluate_in_rollout_sandbox(rollout, before)
    assert reward == 0.0, test


def test_killing_the_execution_server_before_evaluation_scores_zero(rollout: Sandbox) -> None:
    """Not an infrastructure failure (which a trainer leaves out): the rollout's own doing, scored and
    flagged."""
    before = scan_implicit(rollout.workspace)
    with contextlib.suppress(ExecServerError):
        rollout.exec("kill -9 $PPID; sleep 1")  # $PPID: the execution server
    reward, test = evaluate_in_rollout_sandbox(rollout, before)
    assert reward == 0.0 and "execution server was lost" in test["sandbox_lost"], test


def test_patch_adding_a_forging_conftest_is_refused(tmp_path: Path) -> None:
    from handlers.swe.evaluation import evaluate_patch
    from handlers.swe.suite import build_repos

    (textkit,) = build_repos(tmp_path / "repos", names=["textkit"])
    lines = FORGING_CONFTEST.strip("\n").splitlines()
    patch = (
        "diff --git a/conftest.py b/conftest.py\nnew file mode 100644\n--- /dev/null\n+++ b/conftest.py\n"
        f"@@ -0,0 +1,{len(lines)} @@\n" + "".join(f"+{line}\n" for line in lines)
    )
    assert refused_patch_paths(patch) == ["conftest.py"]
    verdict = evaluate_patch(textkit, patch, timeout_s=240)
    assert verdict.reward == 0.0 and not verdict.resolved, verdict.log
    assert verdict.refused_paths == ["conftest.py"]


def test_trusted_path_drops_what_the_sandbox_can_write() -> None:
    path = "/workspace/bin:.:/tmp/x:/usr/local/bin::/usr/bin:/workspace/.venv/bin:/dev/shm"
    assert trusted_path(path, "/workspace") == "/usr/local/bin:/usr/bin"
    assert trusted_path(path, None) == "/workspace/bin:/usr/local/bin:/usr/bin:/workspace/.venv/bin"


def test_an_interpreter_in_a_writable_directory_is_an_infrastructure_failure(runtime: LocalRuntime) -> None:
    """The farm's venv under /tmp: every sandbox has its own writable /tmp, so a rollout could plant a
    `python` there, and an evaluation without that entry finds no `python` and scored the policy 0
    ("python: command not found"). Neither: the evaluation refuses to run and says why."""
    spec = SandboxSpec(env={"PATH": f"/tmp/farm-venv/bin:{BASE_PATH}"})
    with runtime.start(spec) as sandbox, pytest.raises(EvaluatorUnavailable, match="/tmp/farm-venv/bin"):
        evaluation_env(sandbox, rollout_sandbox=False)
    spec = SandboxSpec(env={"PATH": f"/workspace/.venv/bin:{BASE_PATH}"})  # a task's own venv is screened
    with runtime.start(spec) as sandbox:
        assert evaluation_env(sandbox, rollout_sandbox=True)["PATH"] == BASE_PATH


def test_refused_patch_paths_reads_every_diff_header() -> None:
    patch = (
        "diff --git a/pkg/conftest.py b/pkg/conftest.py\n--- a/pkg/conftest.py\n+++ b/pkg/conftest.py\n"
        "diff --git a/src/ok.py b/src/ok.py\n--- a/src/ok.py\n+++ b/src/ok.py\n"
        "diff --git a/x.pth b/x.pth\nnew file mode 100644\n--- /dev/null\n+++ b/x.pth\n"
        "--- a/.venv/bin/pytest\t2024-01-01\n+++ b/.venv/bin/pytest\t2024-01-01\n"
    )
    assert refused_patch_paths(patch) == ["pkg/conftest.py", "x.pth"]
    assert refused_patch_paths(patch, [".venv/bin"]) == [".venv/bin/pytest", "pkg/conftest.py", "x.pth"]
    assert refused_patch_paths("diff --git a/src/ok.py b/src/ok.py\n") == []


def test_changed_implicit_sees_added_removed_and_changed(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text("a")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "pytest.ini").write_text("[pytest]")
    before = scan_implicit(tmp_path)
    (tmp_path / "conftest.py").write_text("b")
    (tmp_path / "sub" / "pytest.ini").unlink()
    (tmp_path / "sub" / "sitecustomize.py").symlink_to("/etc/passwd")
    (tmp_path / "site-packages").mkdir()
    (tmp_path / "site-packages" / "conftest.py").write_text("installed")  # a package's, not loaded
    assert changed_implicit(before, scan_implicit(tmp_path)) == [
        "conftest.py",
        "sub/pytest.ini",
        "sub/sitecustomize.py",
    ]
