"""The hostile-workspace cases for the shipped evaluators besides `test_on_output` (issue 34): the swe /
`patch` evaluator given a patch that puts a link where the test files go, and the `code` handler reading
its solution while a process the agent left keeps swapping it for a fifo. None raises a reward above its
control, none ends with an exception (a failed job a trainer would drop or retry), none reads a host file.

`session_completed` reads nothing of the sandbox (the harness's exit code and the gateway's call count);
`math` grades the answer text. `test_on_output`: test_evaluation_refusals.py and, as real jobs,
test_hostile_workspace_jobs.py."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from containers.local import LocalRuntime
from containers.spec import SandboxSpec
from handlers.code.handler import SOLUTION_PATH, read_solution
from handlers.swe.evaluation import evaluate_patch


def git(repo: Path, *args: str) -> str:
    identity = ["-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    done = subprocess.run(["git", *identity, *args], cwd=repo, capture_output=True, text=True, check=True)
    return done.stdout


@pytest.fixture(scope="module")
def textkit(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from handlers.swe.suite import build_repos

    (instance,) = build_repos(tmp_path_factory.mktemp("repos"), names=["textkit"])
    return instance


def patch_of(textkit: dict[str, Any], tmp_path: Path, change: str) -> str:
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", textkit["repo_path"], str(clone)], check=True)
    git(clone, "checkout", "-q", textkit["base_commit"])
    subprocess.run(["bash", "-c", change], cwd=clone, check=True)
    git(clone, "add", "-A")
    return git(clone, "diff", "--cached", "--binary", "HEAD")


@pytest.mark.slow
@pytest.mark.parametrize(
    "change",
    [
        "git rm -q -r tests && ln -s /tmp tests",
        "rm tests/test_slug.py && ln -s /dev/null tests/test_slug.py",
        "rm -r tests && echo 'not a directory' > tests",
        "rm tests/test_slug.py && mkdir -p tests/test_slug.py/x && echo y > tests/test_slug.py/x/y",
    ],
    ids=["tests-dir-is-a-link", "test-file-is-a-link", "tests-dir-is-a-file", "test-file-is-a-directory"],
)
def test_a_patch_breaking_where_the_tests_go_is_its_own_zero(
    textkit: dict[str, Any], tmp_path: Path, change: str
) -> None:
    """Never an exception (BadTestPatch says "the instance is broken": a failed job, which a DAPO consumer
    retries and a trainer may drop); when the test patch cannot apply on what the patch left, though it
    applies at the base, the verdict says so in `evaluation_refused`."""
    verdict = evaluate_patch(textkit, patch_of(textkit, tmp_path, change), timeout_s=240)
    assert verdict.reward == 0.0 and not verdict.resolved, verdict.log
    print(change, "->", verdict.evaluation_refused)


def test_the_solution_is_read_once_nothing_of_the_agent_runs(runtime: LocalRuntime) -> None:
    swapper = (
        f"mkfifo /tmp/f; printf 'def f():\\n    return 1\\n' > /tmp/s; setsid nohup sh -c 'while :; do "
        f"ln -sfn /tmp/f {SOLUTION_PATH}.n; mv -fT {SOLUTION_PATH}.n {SOLUTION_PATH}; "
        f"cp /tmp/s {SOLUTION_PATH}.n; mv -fT {SOLUTION_PATH}.n {SOLUTION_PATH}; done' "
        ">/dev/null 2>&1 </dev/null & sleep 0.2"
    )
    with runtime.start(SandboxSpec()) as sandbox:
        sandbox.exec(swapper)
        started = time.monotonic()
        solution, missing = read_solution(sandbox)
        assert time.monotonic() - started < 10  # never stuck on the fifo for the read's 20 s timeout
        assert (solution, missing) in (
            ("def f():\n    return 1\n", None),
            (None, f"{SOLUTION_PATH} was not written"),
        )
