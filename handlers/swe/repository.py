"""The instance's repository inside a sandbox: bind its source, check it out at the base commit, and
read back what the agent changed as a diff."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import TYPE_CHECKING, Any

from containers.spec import ReadOnlyBind
from handlers.host_files import HostPathRefused, resolve_inside_roots
from handlers.swe.instance import SweTask

if TYPE_CHECKING:
    from containers import Sandbox

SOURCE_MOUNT = "/swe-source"
"""Where a `repo_path` source is bound (read-only) inside the sandbox."""
SANDBOX_ENV = {"HOME": "/tmp"}
"""HOME defaults to the workspace, where a stray ~/.gitconfig or shell history would land in the diff."""


def sandbox_env(runtime: dict[str, Any]) -> dict[str, str]:
    """Without an image the sandbox sees the farm's own interpreter, whose installed pytest plugins
    belong to the farm, not to the repository under test: loading them costs over a second per run."""
    if runtime.get("image"):
        return dict(SANDBOX_ENV)
    return {**SANDBOX_ENV, "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1"}


BASE_BRANCH = "swe-base"
EXCLUDES = ("__pycache__/", "*.pyc", ".pytest_cache/", ".bash_history", ".python_history")
MAX_PATCH_BYTES = 4 * 1024 * 1024
GIT = "git -c safe.directory='*' -c advice.detachedHead=false -c core.pager=cat"

_PREPARE = f"""
set -u
# The source repository belongs to the host's user, not the sandbox's: git (upload-pack included) trusts
# it only through a global config, never through `-c`.
export GIT_CONFIG_GLOBAL="${{TMPDIR:-/tmp}}/.farm-gitconfig"
printf '[safe]\\n\\tdirectory = *\\n' > "$GIT_CONFIG_GLOBAL"
git() {{ command {GIT} "$@"; }}
if [ -n "$(ls -A)" ]; then echo "the workspace $PWD is not empty" >&2; exit 3; fi
git clone --quiet --no-checkout $SWE_CLONE_FLAGS -- "$SWE_SOURCE" . || {{
  echo "could not clone the repository from $SWE_ORIGIN" >&2; exit 4; }}
if ! git cat-file -e "$SWE_BASE^{{commit}}" 2>/dev/null; then
  echo "base_commit $SWE_BASE is not a commit of $SWE_ORIGIN" >&2; exit 5
fi
git checkout --quiet -B {BASE_BRANCH} "$SWE_BASE" || exit 6
# Later history (the fix) must not be one `git log --all` away: keep only the base branch.
git remote remove origin 2>/dev/null
git for-each-ref --format='%(refname)' refs/heads refs/tags | grep -vx refs/heads/{BASE_BRANCH} |
  while read -r ref; do git update-ref -d "$ref"; done
git clean -fdxq && git reset --hard --quiet || exit 7
printf '%s\\n' {" ".join(shlex.quote(e) for e in EXCLUDES)} >> .git/info/exclude
git rev-parse HEAD
"""

_DIFF = f"""
set -u
git() {{ command {GIT} "$@"; }}
git add -A >/dev/null || exit 3
git diff --cached --binary --no-color --no-ext-diff "$SWE_BASE" > /tmp/swe-agent.patch || exit 4
size=$(stat -c %s /tmp/swe-agent.patch)
if [ "$size" -gt {MAX_PATCH_BYTES} ]; then echo "the diff has $size bytes" >&2; exit 5; fi
cat /tmp/swe-agent.patch
"""


class RepositoryError(RuntimeError):
    """The instance's repository cannot be prepared (missing source or commit, clone failure)."""


class PatchTooLarge(RuntimeError):
    pass


def allowed_source(repo_path: str) -> str:
    """`repo_path` resolved (links and `..` followed) when it is inside an allowed root on this node
    (handlers/host_files.py); RepositoryError otherwise. Readability by the sandbox's user is not
    required: the operator allowed the root, and root-private sources are bound through the staging's
    idmapped mount (see instance.py)."""
    try:
        resolve_inside_roots(repo_path, strict=False)  # first: no existence oracle for other paths
    except HostPathRefused as refused:
        raise RepositoryError(f"repo_path refused: {refused}") from None
    try:
        return resolve_inside_roots(repo_path)
    except HostPathRefused as refused:
        raise RepositoryError(f"repo_path {repo_path}: {refused}") from None


def source_binds(task: SweTask) -> list[ReadOnlyBind]:
    """The repository's bind, from its resolved path (checked again: the one way a host path gets in)."""
    if task.repo_path is None:
        return []
    return [ReadOnlyBind(source=allowed_source(task.repo_path), target=SOURCE_MOUNT)]


def check_source(task: SweTask, *, network: bool) -> None:
    """Fail early, with the reason, when the sandbox could not (or may not) reach the repository."""
    if task.repo_path is not None:
        path = Path(allowed_source(task.repo_path))
        if not path.is_dir():
            raise RepositoryError(f"repo_path {task.repo_path} does not exist (or is not a directory) here")
        if not ((path / ".git").exists() or (path / "HEAD").is_file()):
            raise RepositoryError(f"repo_path {task.repo_path} is not a git repository")
    elif not network:
        raise RepositoryError(
            f"repo_url {task.repo_url} needs a sandbox with network: set runtime.network=true, "
            "or give repo_path"
        )


def prepare_repository(sandbox: Sandbox, task: SweTask, timeout_s: float) -> str:
    """Checks the repository out at `task.base_commit` in the (empty) workspace; returns the full hash."""
    local = task.repo_path is not None
    env = {
        "SWE_SOURCE": SOURCE_MOUNT if local else str(task.repo_url),
        "SWE_ORIGIN": task.repo_path or str(task.repo_url),
        "SWE_CLONE_FLAGS": "--shared" if local else "",
        "SWE_BASE": task.base_commit,
    }
    result = sandbox.exec(_PREPARE, env=env, timeout=timeout_s)
    if result.timed_out:
        raise RepositoryError(f"preparing {task.repo} at {task.base_commit} took over {timeout_s:g} s")
    if result.exit_code != 0:
        detail = (result.stderr or result.stdout).strip()[-1500:]
        raise RepositoryError(f"could not prepare {task.repo} at {task.base_commit}: {detail}")
    return result.stdout.strip().splitlines()[-1]


def workspace_diff(sandbox: Sandbox, base_commit: str, timeout_s: float = 120.0) -> str:
    """Everything changed since `base_commit`, new files included, as a `git apply`-able diff."""
    result = sandbox.exec(
        _DIFF, env={"SWE_BASE": base_commit}, timeout=timeout_s, output_limit=MAX_PATCH_BYTES + 4096
    )
    if result.exit_code == 5:
        raise PatchTooLarge(result.stderr.strip())
    if not result.ok:
        raise RuntimeError(f"git diff failed ({result.exit_code}): {result.stderr.strip()[-1000:]}")
    return result.stdout
