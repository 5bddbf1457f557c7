"""The `patch` evaluator of the harness handler is the swe handler's `evaluate_patch`: a shell harness
fixes a SWE-bench-style repository (a local git repository given as `repo_path`), and the patch taken
from its workspace is scored in a fresh sandbox against the instance's FAIL_TO_PASS / PASS_TO_PASS."""

from __future__ import annotations

import importlib.util
import subprocess
import uuid
from pathlib import Path

import httpx
import pytest

from farm.models.results import JobState
from tests.integration.test_harness_shell import AGENT, submit_task, wait_task

pytestmark = [
    pytest.mark.integration,
    pytest.mark.skipif(
        importlib.util.find_spec("handlers.swe.evaluation") is None,
        reason="handlers/swe/evaluation.py (evaluate_patch, the swe handler's evaluator) is not there yet",
    ),
]

CALC = "def add(a, b):\n    return a - b\n\n\ndef sub(a, b):\n    return a - b\n"
TESTS = (
    "from calc import add, sub\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\n"
    "def test_sub():\n    assert sub(5, 3) == 2\n"
)


def git(repo: Path, *args: str) -> str:
    identity = ["-c", "user.name=t", "-c", "user.email=t@t", "-c", "commit.gpgsign=false"]
    done = subprocess.run(["git", *identity, *args], cwd=repo, capture_output=True, text=True, check=True)
    return done.stdout


@pytest.fixture(scope="module")
def swe_repo(host_files_root: Path) -> dict[str, str]:
    """A repository at its base commit, and the SWE-bench fields of its instance (where the farm allows
    uploads from, readable by the sandbox's user)."""
    repo = host_files_root / "swe-repo"
    repo.mkdir(mode=0o755)
    git(repo, "init", "-q")
    (repo / "calc.py").write_text(CALC)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "base")
    base = git(repo, "rev-parse", "HEAD").strip()
    (repo / "tests").mkdir()
    (repo / "tests" / "test_calc.py").write_text(TESTS)
    git(repo, "add", "-A")
    test_patch = git(repo, "diff", "--cached")
    git(repo, "rm", "-rq", "--cached", "tests")
    (repo / "tests" / "test_calc.py").unlink()
    (repo / "tests").rmdir()
    return {
        "repo_path": str(repo),
        "base_commit": base,
        "test_patch": test_patch,
        "instance_id": "demo__calc-1",
        "repo": "demo/calc",
    }


@pytest.mark.parametrize(("fix", "reward"), [(True, 1.0), (False, 0.0)])
def test_patch_evaluator_scores_the_harness_patch(
    api: httpx.Client, swe_repo: dict[str, str], fix: bool, reward: float
) -> None:
    task = f"harness-patch-{uuid.uuid4().hex[:8]}"
    command = "python /tmp/agent.py"
    if fix:
        command += " && sed -i '0,/return a - b/s//return a + b/' calc.py"
    submit_task(
        api,
        task_id=task,
        instance={
            **swe_repo,
            "FAIL_TO_PASS": ["tests/test_calc.py::test_add"],
            "PASS_TO_PASS": ["tests/test_calc.py::test_sub"],
        },
        runtime={
            "prepare": [
                {"upload": swe_repo["repo_path"], "to": "."},
                {"write": "/tmp/agent.py", "content": AGENT},
            ]
        },
        agent={"harness": "shell", "command": command},
        evaluator={"strategy": "patch", "config": {"timeout_s": 120}},
    )
    result = wait_task(api, task, timeout_s=150)
    assert result.state is JobState.done, result.error
    assert result.reward == reward and result.metadata["evaluator"] == "patch", result.artifacts
    assert result.artifacts["completion_count"] == 1 and len(result.trajectory.traces) == 1
    if fix:
        patch = result.artifacts["patch"]
        assert patch.count("diff --git") == 1 and "+    return a + b" in patch
        assert result.metadata["applied"] is True
        assert result.metadata["fail_to_pass"] == {"tests/test_calc.py::test_add": True}
        assert result.metadata["pass_to_pass"] == {"tests/test_calc.py::test_sub": True}
    else:
        assert result.artifacts["patch"] == ""
