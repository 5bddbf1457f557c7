"""The workspace patch scripts against real git repositories on the host (plain bash, no sandbox)."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from containers.results import ExecResult
from handlers.harness.prepare import GitInitOptions, git_init_command, write_file_command
from handlers.harness.workspace import EMPTY_TREE, apply_patch_script, git_base, take_patch

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def local(cwd: Path) -> Callable[..., ExecResult]:
    """A sandbox.exec look-alike running bash in `cwd` on the host."""

    def execute(cmd: str, timeout: float | None = None, stdin: str | None = None, **_: object) -> ExecResult:
        done = subprocess.run(
            ["bash", "-c", cmd], cwd=cwd, input=stdin, capture_output=True, text=True, timeout=timeout
        )
        return ExecResult(stdout=done.stdout, stderr=done.stderr, exit_code=done.returncode, duration_s=0.0)

    return execute


def write(root: Path, files: dict[str, str]) -> None:
    for name, content in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(content)


def tree(root: Path) -> dict[str, bytes]:
    skip = ("__pycache__", ".git")
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not any(part in skip for part in p.relative_to(root).parts)
    }


def test_base_of_plain_dir_empty_repo_and_committed_repo(tmp_path: Path) -> None:
    execute = local(tmp_path)
    assert git_base(execute) is None
    assert take_patch(execute, None) is None
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)
    assert git_base(execute) == EMPTY_TREE
    write(tmp_path, {"a.txt": "a\n"})
    assert execute(git_init_command(GitInitOptions())).exit_code == 0
    base = git_base(execute)
    assert base and len(base) == 40 and base != EMPTY_TREE
    assert take_patch(execute, base) == ""


def test_patch_reproduces_every_kind_of_change(tmp_path: Path) -> None:
    work, replay = tmp_path / "work", tmp_path / "replay"
    work.mkdir()
    write(work, {"calc.py": "def add(a, b):\n    return a - b\n", "old.txt": "gone soon\n", "keep.md": "k\n"})
    execute = local(work)
    assert execute(git_init_command(GitInitOptions())).exit_code == 0
    base = git_base(execute)
    shutil.copytree(work, replay)

    write(work, {"calc.py": "def add(a, b):\n    return a + b\n", "pkg/new.py": "X = 1\n"})
    (work / "old.txt").unlink()
    (work / "blob.bin").write_bytes(bytes(range(256)))
    write(work, {"__pycache__/calc.cpython-311.pyc": "junk", "pkg/__pycache__/new.pyc": "junk"})
    # a change the harness committed itself is still part of the patch
    write(work, {"keep.md": "k2\n"})
    assert execute("git -c user.name=h -c user.email=h@h commit -qam 'harness commit'").exit_code == 0

    patch = take_patch(execute, base)
    assert patch is not None
    assert "+    return a + b" in patch and "deleted file mode" in patch and "GIT binary patch" in patch
    assert "__pycache__" not in patch
    # the patch is taken through a private index: nothing got staged in the repository's own
    assert execute("git diff --cached --name-only").stdout == ""

    applied = local(replay)(apply_patch_script(), stdin=patch)
    assert applied.exit_code == 0, applied.stderr
    assert tree(replay) == tree(work)


def test_patch_against_the_empty_tree_when_there_was_no_repository(tmp_path: Path) -> None:
    execute = local(tmp_path)
    write(tmp_path, {"made.txt": "by the harness\n"})
    subprocess.run(["git", "init", "-q"], cwd=tmp_path, check=True)  # the harness made the repository
    patch = take_patch(execute, None)
    assert patch is not None and "+by the harness" in patch and "new file mode" in patch


def test_write_file_command_creates_parents_and_mode(tmp_path: Path) -> None:
    execute = local(tmp_path)
    target = tmp_path / "deep" / "dir" / "run.sh"
    content = "#!/bin/sh\necho 'quotes' \"and\" $HOME\n"
    assert execute(write_file_command(str(target), "755"), stdin=content).exit_code == 0
    assert target.read_text() == content
    assert target.stat().st_mode & 0o777 == 0o755
