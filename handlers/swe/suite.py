"""The `swe` sample suite: small Python repositories written for this project, each with a real bug,
an issue text and tests, shipped as source (repos/<name>/files at the base commit, test.diff adding the
FAIL_TO_PASS tests, fix.diff the gold fix; repos/instances.jsonl the rest) and built into git
repositories on demand with fixed authors and dates, so base commits are the same on every machine.

    python -m handlers.swe.suite DEST    # build into DEST, print the instances as JSONL

A farm takes a `repo_path` only inside a directory it allows host files from: build into (or below) one
of FARM_HOST_FILE_ROOTS; `main` says so on stderr when DEST is outside them.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from handlers.host_files import HostPathRefused, resolve_inside_roots

REPOS_DIR = Path(__file__).resolve().parent / "repos"
IDENTITY = {
    "GIT_AUTHOR_NAME": "Rollout Farm Samples",
    "GIT_AUTHOR_EMAIL": "samples@rollout-farm.invalid",
    "GIT_AUTHOR_DATE": "2024-01-01T00:00:00+00:00",
    "GIT_COMMITTER_NAME": "Rollout Farm Samples",
    "GIT_COMMITTER_EMAIL": "samples@rollout-farm.invalid",
    "GIT_COMMITTER_DATE": "2024-01-01T00:00:00+00:00",
}
GITIGNORE = "__pycache__/\n*.pyc\n.pytest_cache/\n"
_SKIPPED_PARTS = {"__pycache__", ".pytest_cache"}


class Sample(BaseModel):
    name: str
    """Directory under repos/."""
    instance_id: str
    repo: str
    problem_statement: str
    FAIL_TO_PASS: list[str]
    PASS_TO_PASS: list[str]

    @property
    def root(self) -> Path:
        return REPOS_DIR / self.name

    @property
    def test_patch(self) -> str:
        return (self.root / "test.diff").read_text()

    @property
    def gold_patch(self) -> str:
        return (self.root / "fix.diff").read_text()

    def files(self) -> dict[str, bytes]:
        """The repository's files at the base commit, by relative POSIX path, sorted."""
        base = self.root / "files"
        found = {}
        for path in sorted(base.rglob("*")):
            relative = path.relative_to(base)
            if path.is_file() and not _SKIPPED_PARTS & set(relative.parts) and path.suffix != ".pyc":
                found[relative.as_posix()] = path.read_bytes()
        return found


def samples() -> list[Sample]:
    lines = (REPOS_DIR / "instances.jsonl").read_text(encoding="utf-8").splitlines()
    return [Sample.model_validate_json(line) for line in lines if line.strip()]


def _git(repo: Path, *args: str) -> str:
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(repo),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "LC_ALL": "C",
        **IDENTITY,
    }
    command = ["git", "-c", "core.autocrlf=false", "-c", "commit.gpgsign=false", *args]
    done = subprocess.run(command, cwd=repo, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        raise RuntimeError(f"git {' '.join(args)} failed in {repo}: {done.stderr.strip()}")
    return done.stdout.strip()


def build_repo(sample: Sample, dest: Path) -> str:
    """A git repository of `sample` at its base commit in `dest` (new or empty); returns the commit."""
    if dest.exists() and any(dest.iterdir()):
        raise FileExistsError(f"{dest} exists and is not empty")
    dest.mkdir(parents=True, exist_ok=True)
    for relative, content in {**sample.files(), ".gitignore": GITIGNORE.encode()}.items():
        target = dest / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(content)
        target.chmod(0o644)
    _git(dest, "init", "--quiet", "--initial-branch=main")
    _git(dest, "add", "--all")
    _git(dest, "commit", "--quiet", "--no-verify", "-m", f"{sample.repo}: base of {sample.instance_id}")
    return _git(dest, "rev-parse", "HEAD")


def instance(sample: Sample, repo_path: Path, base_commit: str) -> dict[str, Any]:
    """The sample as a `swe` instance (SWE-bench fields, `patch` being the gold fix)."""
    return {
        "handler": "swe",
        "instance_id": sample.instance_id,
        "repo": sample.repo,
        "base_commit": base_commit,
        "problem_statement": sample.problem_statement,
        "test_patch": sample.test_patch,
        "patch": sample.gold_patch,
        "FAIL_TO_PASS": sample.FAIL_TO_PASS,
        "PASS_TO_PASS": sample.PASS_TO_PASS,
        "repo_path": str(repo_path),
    }


def build_repos(dest: str | Path, names: list[str] | None = None) -> list[dict[str, Any]]:
    """Builds every sample (or the named ones) as dest/<name>; returns their instances."""
    root = Path(dest).resolve()
    chosen = [s for s in samples() if names is None or s.name in names]
    return [instance(s, root / s.name, build_repo(s, root / s.name)) for s in chosen]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m handlers.swe.suite DEST", file=sys.stderr)
        return 2
    for built in build_repos(args[0]):
        print(json.dumps(built))
    try:
        resolve_inside_roots(str(Path(args[0]).resolve()))
    except HostPathRefused:
        print(
            f"note: a farm takes these repo_paths only if {Path(args[0]).resolve()} is inside one of its "
            "FARM_HOST_FILE_ROOTS (set it on the API and the workers)",
            file=sys.stderr,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
