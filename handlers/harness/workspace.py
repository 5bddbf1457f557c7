"""The workspace as a git repository: the base recorded after `prepare`, and the patch taken after the
harness (everything it changed, committed or not, new files included, build droppings left out)."""

from __future__ import annotations

import shlex
from collections.abc import Callable

from containers.results import ExecResult

EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
"""git's well-known empty tree: the base of a repository that has no commit yet."""
PATCH_EXCLUDES = ("__pycache__/", "*.pyc", ".pytest_cache/", "node_modules/", ".mypy_cache/", ".ruff_cache/")
PATCH_OUTPUT_LIMIT = 16 * 1024 * 1024
NOT_A_REPOSITORY = 3

Exec = Callable[..., ExecResult]

BASE_SCRIPT = f"""
git rev-parse --is-inside-work-tree >/dev/null 2>&1 || exit {NOT_A_REPOSITORY}
git rev-parse --verify -q 'HEAD^{{commit}}' || echo {EMPTY_TREE}
"""


def git_base(execute: Exec) -> str | None:
    """The commit (or the empty tree) the workspace's patch will be taken against; None: not a repo."""
    result = execute(BASE_SCRIPT, timeout=60.0)
    if result.exit_code != 0:
        return None
    lines = result.stdout.split()
    return lines[-1] if lines else None


def patch_script(base: str) -> str:
    """bash printing the binary-safe diff from `base` to the working tree, through a private index so the
    repository's own index is untouched."""
    excludes = "\\n".join(PATCH_EXCLUDES)
    return f"""
set -e
git rev-parse --is-inside-work-tree >/dev/null 2>&1 || exit {NOT_A_REPOSITORY}
scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
printf '{excludes}\\n' > "$scratch/exclude"
export GIT_INDEX_FILE="$scratch/index"
git -c core.excludesFile="$scratch/exclude" add -A .
git diff --cached --binary --no-color --no-ext-diff --no-renames {shlex.quote(base)}
"""


def take_patch(execute: Exec, base: str | None) -> str | None:
    """The patch, "" when nothing changed, None when the workspace is not a git repository."""
    result = execute(patch_script(base or EMPTY_TREE), timeout=120.0, output_limit=PATCH_OUTPUT_LIMIT)
    if result.exit_code == NOT_A_REPOSITORY:
        return None
    if result.exit_code != 0:
        raise RuntimeError(f"could not take the workspace patch: {result.stderr.strip()[-1000:]}")
    return result.stdout


def apply_patch_script() -> str:
    """bash applying the patch on stdin to the repository in the working directory."""
    return "git apply --whitespace=nowarn -"
