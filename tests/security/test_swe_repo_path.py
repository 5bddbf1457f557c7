"""A `swe` job's repository comes only from where the operator allows.

The attack: a dataset row whose `repo_path` names a git repository elsewhere on the host, here one in a
root-only (0700) directory holding a secret. The repository is bound read-only into the sandbox and the
farm's staging makes root-private sources readable there (containers/identity.py `Staging.idmapped`), so
before the fix the agent's first `cat` printed the secret. Now the path must resolve, links and `..`
followed, inside FARM_HOST_FILE_ROOTS or the project's own task data: refused by the instance's validator
(a 422 naming `repo_path` through the API) and again by the worker before any sandbox starts. A
root-private repository INSIDE an allowed root is still bound and readable: the operator allowed it."""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from containers.local import LocalRuntime
from containers.spec import SandboxSpec
from farm.settings import get_settings
from handlers.swe.instance import SweInstance, SweTask
from handlers.swe.repository import (
    SANDBOX_ENV,
    RepositoryError,
    check_source,
    prepare_repository,
    source_binds,
)
from tests.handlers.swe.conftest import requires_bwrap

SECRET = "AWS_SECRET_ACCESS_KEY=host-secret-91c2"


def git_repo(path: Path) -> str:
    """A one-commit git repository at `path` holding the secret; returns its commit."""
    path.mkdir(mode=0o700)
    (path / "secrets.env").write_text(SECRET + "\n")
    (path / "secrets.env").chmod(0o600)
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    env |= {"GIT_AUTHOR_NAME": "x", "GIT_AUTHOR_EMAIL": "x@x", "GIT_COMMITTER_NAME": "x"}
    env |= {"GIT_COMMITTER_EMAIL": "x@x"}
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "secrets"]):
        subprocess.run(["git", *args], cwd=path, env=env, check=True)
    return subprocess.run(
        ["git", "rev-parse", "HEAD"], cwd=path, env=env, check=True, capture_output=True, text=True
    ).stdout.strip()


@pytest.fixture(scope="module")
def layout() -> Iterator[dict[str, Any]]:
    """An allowed root and, beside it, a root-only directory that is not allowed; each holds a repository
    (the allowed one in a 0700 directory too), and the allowed root holds a link and a `..` path out."""
    base = Path(tempfile.mkdtemp(prefix="farm-swe-source-"))
    allowed, outside = base / "allowed", base / "outside"
    allowed.mkdir(mode=0o755)
    outside.mkdir(mode=0o700)
    commit = git_repo(outside / "private")
    (allowed / "private").mkdir(mode=0o700)
    inside_commit = git_repo(allowed / "private" / "repo")
    (allowed / "link").symlink_to(outside / "private")
    yield {"allowed": allowed, "outside": outside, "commit": commit, "inside_commit": inside_commit}


@pytest.fixture
def roots(layout: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The farm of this test allows only `allowed` (the settings are read again with it, then restored)."""
    monkeypatch.setenv("FARM_HOST_FILE_ROOTS", str(layout["allowed"]))
    get_settings.cache_clear()
    yield layout["allowed"]
    monkeypatch.undo()
    get_settings.cache_clear()


def row(repo_path: str, commit: str) -> dict[str, Any]:
    return {
        "handler": "swe",
        "instance_id": "loot__secrets-1",
        "repo": "loot/secrets",
        "base_commit": commit,
        "problem_statement": "Print secrets.env.",
        "FAIL_TO_PASS": ["test_x.py::test_x"],
        "repo_path": repo_path,
    }


def attacks(layout: dict[str, Any]) -> list[str]:
    allowed, outside = layout["allowed"], layout["outside"]
    return [
        str(outside / "private"),  # plainly elsewhere
        f"{allowed}/../outside/private",  # `..` out of the root
        str(allowed / "link"),  # a link out of the root
        f"{outside}/missing/../private",  # a component that does not exist here
    ]


def test_a_repository_outside_the_roots_is_refused_naming_repo_path(
    roots: Path, layout: dict[str, Any]
) -> None:
    for path in attacks(layout):
        with pytest.raises(ValidationError) as caught:
            SweInstance.model_validate(row(path, layout["commit"]))
        errors = caught.value.errors()
        assert [e["loc"] for e in errors] == [("repo_path",)], (path, errors)
        assert "FARM_HOST_FILE_ROOTS" in errors[0]["msg"] and SECRET not in str(caught.value)


def test_the_worker_refuses_it_before_any_sandbox(roots: Path, layout: dict[str, Any]) -> None:
    """A row that reached a worker some other way (an older API, a queue written directly) is refused
    there too: check_source runs before the sandbox and its binds exist."""
    for path in attacks(layout):
        task = SweTask.model_construct(**row(path, layout["commit"]))
        with pytest.raises(RepositoryError, match="FARM_HOST_FILE_ROOTS"):
            check_source(task, network=False)
        with pytest.raises(RepositoryError, match="FARM_HOST_FILE_ROOTS"):
            source_binds(task)


@requires_bwrap
def test_a_root_private_repository_inside_a_root_stays_readable(
    roots: Path, layout: dict[str, Any], tmp_path: Path
) -> None:
    """The operator allowed it: bound (through the idmapped staging when the farm runs as root) and
    cloned like any task repository."""
    task = SweTask.model_validate(row(str(roots / "private" / "repo"), layout["inside_commit"]))
    check_source(task, network=False)
    runtime = LocalRuntime(root=tmp_path / "sandboxes")
    with runtime.start(SandboxSpec(ro_binds=source_binds(task), env=SANDBOX_ENV)) as sandbox:
        prepare_repository(sandbox, task, timeout_s=60)
        assert sandbox.exec("cat secrets.env", timeout=30).stdout.strip() == SECRET
