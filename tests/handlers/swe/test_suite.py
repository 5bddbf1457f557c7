"""The sample suite: deterministic git repositories whose bugs are real, scored in real sandboxes.

For every sample: the gold fix resolves it, the unfixed repository fails exactly the FAIL_TO_PASS
tests (and keeps PASS_TO_PASS green), the scripted policy's wrong edit scores 0, its right edit 1,
and an empty patch 0."""

from __future__ import annotations

import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from farm.llm.policies.scripts import Script
from handlers.swe.evaluation import evaluate_patch
from handlers.swe.handler import user_prompt
from handlers.swe.instance import SweInstance
from handlers.swe.suite import REPOS_DIR, build_repos, samples
from handlers.swe.verdict import PatchVerdict
from tests.handlers.swe.conftest import edit_step, patch_from_edit, requires_bwrap, script_for

NAMES = [s.name for s in samples()]
NOOP_PATCH = (
    "diff --git a/NOTES.md b/NOTES.md\nnew file mode 100644\n--- /dev/null\n+++ b/NOTES.md\n"
    "@@ -0,0 +1 @@\n+notes\n"
)


def _git(repo: str, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True, text=True).stdout.strip()


def test_at_least_five_samples_with_issue_tests_and_fixes() -> None:
    assert len(NAMES) >= 5 and len(set(NAMES)) == len(NAMES)
    for sample in samples():
        assert sample.FAIL_TO_PASS and sample.PASS_TO_PASS
        assert not set(sample.FAIL_TO_PASS) & set(sample.PASS_TO_PASS)
        for test_id in sample.FAIL_TO_PASS:  # added by the test patch, absent at the base
            name = test_id.split("::")[-1]
            assert f"+def {name}(" in sample.test_patch
            assert f"def {name}(" not in sample.files()[test_id.split("::")[0]].decode()
        for test_id in sample.PASS_TO_PASS:
            assert f"def {test_id.split('::')[-1]}(" in sample.files()[test_id.split("::")[0]].decode()
        assert sample.gold_patch.startswith("diff --git") and "tests/" not in sample.gold_patch


def test_builds_are_deterministic(built: dict[str, dict[str, Any]], tmp_path: Path) -> None:
    again = {Path(i["repo_path"]).name: i for i in build_repos(tmp_path, names=NAMES[:2])}
    for name, inst in again.items():
        assert inst["base_commit"] == built[name]["base_commit"]
        assert _git(inst["repo_path"], "log", "--format=%an|%cn|%aI|%cI") == (
            "Rollout Farm Samples|Rollout Farm Samples|2024-01-01T00:00:00+00:00|2024-01-01T00:00:00+00:00"
        )
        assert _git(inst["repo_path"], "status", "--porcelain") == ""
    with pytest.raises(FileExistsError):
        build_repos(tmp_path, names=NAMES[:1])


def test_built_instances_validate(built: dict[str, dict[str, Any]]) -> None:
    for inst in built.values():
        model = SweInstance.model_validate(inst)
        assert len(model.base_commit) == 40 and Path(model.repo_path or "").is_dir()


def test_every_sample_has_a_script_through_real_tool_calls(
    built: dict[str, dict[str, Any]], scripts: list[Script]
) -> None:
    for name, inst in built.items():
        script = script_for(scripts, inst)
        prompt = user_prompt(SweInstance.model_validate(inst), "/workspace")
        assert script.match in prompt
        assert [s for s in scripts if s.match in prompt] == [script], f"{name}: the match is not distinctive"
        for steps in (script.steps, script.wrong_steps):
            assert [s.tool for s in steps] == ["bash", "editor", "bash", "finish"]
            assert edit_step(steps)["command"] == "str_replace"
        assert script.divergence == 1  # the fate is drawn at the edit


NO_CACHE = ["-p", "no:cacheprovider", str(REPOS_DIR)]


def test_shipped_sources_are_not_collected_by_the_farms_test_run() -> None:
    root = REPOS_DIR.parents[2]
    assert 'testpaths = ["tests"]' in (root / "pyproject.toml").read_text()
    # Collection is pytest's own rules, the ini and the conftests; the installed plugins (hypothesis,
    # schemathesis, anyio, timeout, benchmark, platformdirs) add no collector of files, and loading them
    # was 2.2 of this run's 2.5 s of CPU.
    done = subprocess.run(
        # xdist named: pyproject's addopts say `-n auto`, which only a loaded xdist understands
        [sys.executable, "-m", "pytest", "-p", "xdist.plugin", "-n", "0", "--collect-only", "-q", *NO_CACHE],
        cwd=root,
        env={**os.environ, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"},
        capture_output=True,
        text=True,
    )
    assert "no tests collected" in done.stdout, done.stdout


@pytest.fixture(scope="module")
def verdicts(
    built: dict[str, dict[str, Any]], scripts: list[Script], tmp_path_factory: pytest.TempPathFactory
) -> dict[tuple[str, str], PatchVerdict]:
    """Every (sample, patch kind) scored, two at a time (each evaluation is mostly one pytest run)."""
    if requires_bwrap.args[0]:
        pytest.skip("bubblewrap is not installed")
    jobs: dict[tuple[str, str], tuple[dict[str, Any], str]] = {}
    for name, inst in built.items():
        script = script_for(scripts, inst)
        scratch = tmp_path_factory.mktemp(f"edits-{name}")
        right = patch_from_edit(inst["repo_path"], edit_step(script.steps), scratch)
        jobs[(name, "gold")] = (inst, inst["patch"])
        jobs[(name, "unfixed")] = (inst, NOOP_PATCH)
        jobs[(name, "wrong")] = (
            inst,
            patch_from_edit(inst["repo_path"], edit_step(script.wrong_steps), scratch),
        )
        if right != inst["patch"]:
            jobs[(name, "right")] = (inst, right)
    with ThreadPoolExecutor(max_workers=2) as pool:
        futures = {
            key: pool.submit(evaluate_patch, inst, patch, timeout_s=120)
            for key, (inst, patch) in jobs.items()
        }
        return {key: future.result() for key, future in futures.items()}


@requires_bwrap
@pytest.mark.parametrize("name", NAMES)
def test_gold_fix_resolves(name: str, verdicts: dict[tuple[str, str], PatchVerdict]) -> None:
    verdict = verdicts[(name, "gold")]
    assert verdict.reward == 1.0 and verdict.resolved and verdict.applied, verdict.log
    assert all(verdict.fail_to_pass.values()) and all(verdict.pass_to_pass.values())
    assert set(verdict.outcomes.values()) == {"PASSED"}


@requires_bwrap
@pytest.mark.parametrize("name", NAMES)
def test_unfixed_repository_fails_exactly_the_fail_to_pass_tests(
    name: str, verdicts: dict[tuple[str, str], PatchVerdict]
) -> None:
    verdict = verdicts[(name, "unfixed")]
    assert verdict.applied and verdict.reward == 0.0, verdict.log
    assert not any(verdict.fail_to_pass.values()), verdict.outcomes
    assert all(verdict.pass_to_pass.values()), verdict.outcomes


@requires_bwrap
@pytest.mark.parametrize("name", NAMES)
def test_scripted_edits_score_as_intended(name: str, verdicts: dict[tuple[str, str], PatchVerdict]) -> None:
    wrong = verdicts[(name, "wrong")]
    assert wrong.applied and wrong.reward == 0.0 and not wrong.resolved, wrong.outcomes
    right = verdicts.get((name, "right"), verdicts[(name, "gold")])
    assert right.reward == 1.0, right.log


@requires_bwrap
def test_wrong_edits_fail_in_both_ways(verdicts: dict[tuple[str, str], PatchVerdict]) -> None:
    """Some wrong edits leave an issue test failing, others break a test that passed before."""
    wrong = [v for (_, kind), v in verdicts.items() if kind == "wrong"]
    assert any(not all(v.fail_to_pass.values()) for v in wrong)
    assert any(all(v.fail_to_pass.values()) and not all(v.pass_to_pass.values()) for v in wrong)


@pytest.mark.parametrize("patch", ["", "  \n"])
def test_empty_patch_scores_zero_without_a_sandbox(built: dict[str, dict[str, Any]], patch: str) -> None:
    verdict = evaluate_patch(built[NAMES[0]], patch)
    assert verdict.reward == 0.0 and not verdict.applied and "empty patch" in verdict.log
    assert verdict.fail_to_pass and not any(verdict.fail_to_pass.values())
