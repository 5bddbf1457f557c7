"""The repository in a sandbox and the evaluator's edges: sources, hidden history, the agent's diff,
patches that do not apply, broken test patches, timeouts, cancellation, an unavailable harness."""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from containers.local import LocalRuntime
from containers.sandbox import Sandbox
from containers.spec import SandboxSpec
from handlers.evaluation_guard import EvaluatorUnavailable
from handlers.swe.evaluation import BadTestPatch, evaluate_patch
from handlers.swe.instance import SweTask
from handlers.swe.repository import (
    SANDBOX_ENV,
    RepositoryError,
    check_source,
    prepare_repository,
    source_binds,
    workspace_diff,
)
from handlers.swe.swebench_harness import unavailable_reason
from tests.handlers.swe.conftest import requires_bwrap

pytestmark = requires_bwrap


@pytest.fixture(scope="module")
def runtime(tmp_path_factory: pytest.TempPathFactory) -> LocalRuntime:
    return LocalRuntime(root=tmp_path_factory.mktemp("swe-sandboxes"))


@pytest.fixture
def textkit(built: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return built["textkit"]


def start(runtime: LocalRuntime, task: SweTask) -> Sandbox:
    return runtime.start(SandboxSpec(ro_binds=source_binds(task), env=SANDBOX_ENV))


@pytest.fixture
def with_future(textkit: dict[str, Any], tmp_path: Path) -> Iterator[tuple[SweTask, str]]:
    """A copy of textkit with one more commit (the 'fix') on a branch and a tag after the base."""
    repo = tmp_path / "textkit"
    subprocess.run(["git", "clone", "-q", textkit["repo_path"], str(repo)], check=True)
    ident = ["-c", "user.name=t", "-c", "user.email=t@t"]
    (repo / "FUTURE.md").write_text("the fix\n")
    for args in (["add", "FUTURE.md"], [*ident, "commit", "-qm", "future"], ["tag", "v2"]):
        subprocess.run(["git", *args], cwd=repo, check=True)
    head = subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=repo, capture_output=True, text=True
    ).stdout.strip()
    yield SweTask.model_validate({**textkit, "repo_path": str(repo)}), head


def test_checkout_is_at_the_base_with_later_history_out_of_reach(
    runtime: LocalRuntime, with_future: tuple[SweTask, str]
) -> None:
    task, future = with_future
    with start(runtime, task) as sandbox:
        assert prepare_repository(sandbox, task, timeout_s=60) == task.base_commit
        log = sandbox.exec("git log --all --format=%H; git tag; git remote; ls").stdout.split()
        assert task.base_commit in log and future not in log and "v2" not in log
        assert "FUTURE.md" not in log and "textkit" in log
        assert sandbox.exec("git status --porcelain").stdout == ""


def test_diff_holds_edits_and_new_files_but_not_caches(
    runtime: LocalRuntime, textkit: dict[str, Any]
) -> None:
    task = SweTask.model_validate(textkit)
    with start(runtime, task) as sandbox:
        base = prepare_repository(sandbox, task, timeout_s=60)
        assert workspace_diff(sandbox, base) == ""
        sandbox.exec(
            "sed -i 's/a-z0-9]/a-z0-9]+/' textkit/slug.py && mkdir -p docs && echo hi > docs/new.md && "
            "python -c 'import textkit' && python -m pytest -q tests >/dev/null && "
            "git -c user.name=a -c user.email=a@a commit -qam wip && git config --global x.y 1"
        )
        diff = workspace_diff(sandbox, base)
    assert '+_NOT_ALNUM = re.compile(r"[^a-z0-9]+")' in diff and "+++ b/docs/new.md" in diff
    assert "__pycache__" not in diff and ".pytest_cache" not in diff and "gitconfig" not in diff


def test_a_bare_repository_is_a_source(
    runtime: LocalRuntime, textkit: dict[str, Any], tmp_path: Path
) -> None:
    bare = tmp_path / "textkit.git"
    subprocess.run(["git", "clone", "-q", "--bare", textkit["repo_path"], str(bare)], check=True)
    verdict = evaluate_patch({**textkit, "repo_path": str(bare)}, textkit["patch"], timeout_s=120)
    assert verdict.reward == 1.0, verdict.log


def test_missing_sources_and_commits_are_named(
    runtime: LocalRuntime, textkit: dict[str, Any], tmp_path: Path
) -> None:
    with pytest.raises(RepositoryError, match="does not exist"):
        check_source(SweTask.model_validate({**textkit, "repo_path": str(tmp_path / "nope")}), network=False)
    with pytest.raises(RepositoryError, match="not a git repository"):
        check_source(SweTask.model_validate({**textkit, "repo_path": str(tmp_path)}), network=False)
    remote = {k: v for k, v in textkit.items() if k != "repo_path"} | {
        "repo_url": "https://example.org/x.git"
    }
    with pytest.raises(RepositoryError, match=r"runtime\.network"):
        check_source(SweTask.model_validate(remote), network=False)
    task = SweTask.model_validate({**textkit, "base_commit": "deadbeef" * 5})
    with start(runtime, task) as sandbox, pytest.raises(RepositoryError, match="base_commit deadbeef"):
        prepare_repository(sandbox, task, timeout_s=60)
    with pytest.raises(RepositoryError, match="is not a commit"):
        evaluate_patch(task, textkit["patch"], timeout_s=60)


def test_a_patch_that_does_not_apply_scores_zero(textkit: dict[str, Any]) -> None:
    stale = textkit["patch"].replace(
        '-_NOT_ALNUM = re.compile(r"[^a-z0-9]")', '-_NOT_ALNUM = re.compile("x")'
    )
    verdict = evaluate_patch(textkit, stale, timeout_s=60)
    assert verdict.reward == 0.0 and not verdict.applied
    assert "does not apply" in verdict.log and set(verdict.outcomes.values()) == {"MISSING"}


def test_a_patch_that_edits_the_tests_cannot_weaken_them(textkit: dict[str, Any]) -> None:
    """The files the test patch touches are reset to the base before it is applied."""
    cheat = (
        "diff --git a/tests/test_slug.py b/tests/test_slug.py\n--- a/tests/test_slug.py\n"
        "+++ b/tests/test_slug.py\n@@ -17,2 +17,2 @@ def test_custom_separator():\n"
        " def test_edges_are_trimmed():\n"
        '-    assert slugify("  padded  ") == "padded"\n'
        "+    assert True\n"
    )
    verdict = evaluate_patch(textkit, textkit["patch"] + cheat, timeout_s=120)
    assert verdict.applied and verdict.reward == 1.0, verdict.log  # the test patch applied after all
    assert "tests/test_slug.py" in verdict.log  # git apply --verbose reported both patches' files


def test_a_broken_test_patch_is_an_instance_error(textkit: dict[str, Any]) -> None:
    broken = {
        **textkit,
        "test_patch": textkit["test_patch"].replace(" def test_edges_are_trimmed", " def gone"),
    }
    with pytest.raises(BadTestPatch, match="test patch of farm-samples__textkit-1"):
        evaluate_patch(broken, textkit["patch"], timeout_s=60)


def test_a_test_run_past_the_timeout_scores_zero(textkit: dict[str, Any]) -> None:
    slow = {**textkit, "test_command": "sleep 30; python -m pytest"}
    started = time.monotonic()
    verdict = evaluate_patch(slow, textkit["patch"], timeout_s=4)
    assert time.monotonic() - started < 15
    assert verdict.timed_out and verdict.applied and verdict.reward == 0.0


def test_check_can_abandon_an_evaluation(textkit: dict[str, Any]) -> None:
    class Cancelled(Exception):
        pass

    def check() -> None:
        raise Cancelled

    with pytest.raises(Cancelled):
        evaluate_patch(textkit, textkit["patch"], timeout_s=60, check=check)


@pytest.mark.skipif(unavailable_reason() is None, reason="swebench and Docker are available here")
def test_choosing_an_unavailable_swebench_harness_is_a_clear_error(textkit: dict[str, Any]) -> None:
    with pytest.raises(EvaluatorUnavailable, match="evaluator 'swebench' was chosen but"):
        evaluate_patch({**textkit, "evaluator": "swebench"}, textkit["patch"])
    assert evaluate_patch({**textkit, "evaluator": "swebench"}, "").reward == 0.0
