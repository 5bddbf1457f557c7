"""Fixtures for the swe handler tests: the sample suite built as git repositories, and the scripted
policy's edits turned into patches."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from containers.bwrap import find_bwrap
from farm.llm.policies.scripts import Script, load_scripts
from handlers.swe.suite import REPOS_DIR, build_repos

requires_bwrap = pytest.mark.skipif(find_bwrap() is None, reason="bubblewrap is not installed")
SCRIPTS_FILE = REPOS_DIR.parent / "scripts" / "swe.jsonl"


@pytest.fixture(scope="session")
def built(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Instances of every sample by repository directory name, built into a private directory."""
    instances = build_repos(tmp_path_factory.mktemp("swe-repos"))
    return {Path(inst["repo_path"]).name: inst for inst in instances}


@pytest.fixture(scope="session")
def scripts() -> list[Script]:
    return load_scripts([SCRIPTS_FILE])


def script_for(scripts: list[Script], instance: dict[str, Any]) -> Script:
    first_line = instance["problem_statement"].splitlines()[0]
    (found,) = [s for s in scripts if s.match in first_line]
    return found


def edit_step(steps: Any) -> dict[str, Any]:
    """The arguments of the one editor call of a script path."""
    (edit,) = [step.arguments for step in steps if step.tool == "editor"]
    return edit


def patch_from_edit(repo: str, edit: dict[str, Any], scratch: Path) -> str:
    """The diff a str_replace edit makes to a fresh clone of `repo` (as the agent's workspace would)."""
    clone = scratch / "clone"
    shutil.rmtree(clone, ignore_errors=True)
    subprocess.run(["git", "clone", "-q", repo, str(clone)], check=True)
    target = clone / edit["path"].removeprefix("/workspace/")
    text = target.read_text()
    assert text.count(edit["old_str"]) == 1, (repo, edit["old_str"])
    target.write_text(text.replace(edit["old_str"], edit["new_str"]))
    return subprocess.run(["git", "diff"], cwd=clone, check=True, capture_output=True, text=True).stdout
