"""`prepare` steps: what init does to a fresh sandbox before the harness runs.

A step is a shell command string, or one of:
    {"run": "make deps", "cwd"?: "sub/dir", "timeout_s"?: 600, "env"?: {...}}
    {"write": "src/app.py", "content": "...", "mode"?: "755"}      (relative paths are in the workdir)
    {"git_init": true}   or   {"git_init": {"commit": true, "message": "base"}}
        a repository with everything present committed as the base the patch is taken against
    {"upload": "/host/path", "to": "dest"}                          (a host file or directory)

An upload's host path must be inside the roots the operator allows and readable by the sandbox's user, who
reads it (handlers/host_files.py): checked when the steps are parsed (at submit, and on the worker).
"""

from __future__ import annotations

import posixpath
import shlex
import subprocess
from collections.abc import Callable
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError, field_validator

from containers import Sandbox
from containers.results import ExecResult
from handlers.host_files import HostPathRefused, check_host_path, pack_as_sandbox_user

GIT_IDENTITY = [
    "-c",
    "user.name=rollout-farm",
    "-c",
    "user.email=farm@localhost",
    "-c",
    "commit.gpgsign=false",
]


class PrepareFailed(RuntimeError):
    """A prepare step failed; the message names the step and carries the command's output tail."""


class _Step(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class RunStep(_Step):
    run: str = Field(min_length=1)
    cwd: str | None = None
    timeout_s: float = Field(600.0, gt=0)
    env: dict[str, str] = Field(default_factory=dict)

    def describe(self) -> str:
        return f"run {_short(self.run)!r}"


class WriteStep(_Step):
    write: str = Field(min_length=1)
    content: str
    mode: str | None = Field(None, pattern=r"^[0-7]{3,4}$")

    def describe(self) -> str:
        return f"write {self.write}"


class GitInitOptions(_Step):
    commit: bool = True
    message: str = "base"


class GitInitStep(_Step):
    git_init: bool | GitInitOptions

    @field_validator("git_init")
    @classmethod
    def _true_or_options(cls, value: bool | GitInitOptions) -> bool | GitInitOptions:
        if value is False:
            raise ValueError("use true or an object of options")
        return value

    @property
    def options(self) -> GitInitOptions:
        return self.git_init if isinstance(self.git_init, GitInitOptions) else GitInitOptions()

    def describe(self) -> str:
        return "git_init"


class UploadStep(_Step):
    upload: str = Field(min_length=1)
    to: str = "."

    @field_validator("upload")
    @classmethod
    def _absolute(cls, value: str) -> str:
        if not value.startswith("/"):
            raise ValueError("the host path must be absolute")
        return value

    def describe(self) -> str:
        return f"upload {self.upload}"


Step = RunStep | WriteStep | GitInitStep | UploadStep
_steps = TypeAdapter(list[Annotated[Step, Field(union_mode="left_to_right")]])

Exec = Callable[..., ExecResult]
"""`sandbox.exec`-compatible: (cmd, cwd=, env=, timeout=, stdin=) -> ExecResult."""


def parse_steps(raw: list[Any], field: str) -> list[Step]:
    """Validated steps; a bad one raises ValueError naming `field[index]`."""
    if not isinstance(raw, list):
        raise ValueError(f"{field}: must be a list of steps")
    normalized = [{"run": item} if isinstance(item, str) else item for item in raw]
    for index, item in enumerate(normalized):
        if not isinstance(item, dict):
            raise ValueError(f"{field}[{index}]: a step is a command string or an object")
    try:
        steps = _steps.validate_python(normalized)
    except ValidationError as exc:
        error = exc.errors()[0]
        where = error["loc"][0] if error["loc"] else "?"
        raise ValueError(
            f"{field}[{where}]: not a valid step ({_describe_error(normalized, where)})"
        ) from None
    for index, step in enumerate(steps):
        if isinstance(step, UploadStep):
            try:
                check_host_path(step.upload)
            except HostPathRefused as exc:
                raise ValueError(f"{field}[{index}].upload: {exc}") from None
    return steps


def _describe_error(items: list[dict[str, Any]], index: Any) -> str:
    item = items[index] if isinstance(index, int) and index < len(items) else {}
    kinds = [k for k in ("run", "write", "git_init", "upload") if k in item]
    if len(kinds) != 1:
        return "give exactly one of run / write / git_init / upload"
    errors = {
        RunStep: "run: a command, optional cwd, timeout_s > 0, env",
        WriteStep: "write: a path with `content` (and optional octal `mode`)",
        GitInitStep: "git_init: true or {commit, message}",
        UploadStep: "upload: an absolute host path, optional `to`",
    }
    model = {"run": RunStep, "write": WriteStep, "git_init": GitInitStep, "upload": UploadStep}[kinds[0]]
    return errors[model]


def _short(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def tail(text: str, limit: int = 2000) -> str:
    return text if len(text) <= limit else "..." + text[-limit:]


def sandbox_path(workdir: str, path: str) -> str:
    return posixpath.normpath(path if path.startswith("/") else posixpath.join(workdir, path))


def write_file_command(path: str, mode: str | None = None) -> str:
    """bash that writes stdin to `path` (parents created)."""
    quoted = shlex.quote(path)
    command = f'mkdir -p -- "$(dirname -- {quoted})" && cat > {quoted}'
    if mode:
        command += f" && chmod {mode} {quoted}"
    return command


def git_init_command(options: GitInitOptions) -> str:
    identity = shlex.join(GIT_IDENTITY)
    command = "(git rev-parse --is-inside-work-tree >/dev/null 2>&1 || git init -q)"
    if options.commit:
        message = shlex.quote(options.message)
        command += f" && git add -A && git {identity} commit -q --allow-empty -m {message}"
    return command


def run_steps(
    sandbox: Sandbox, steps: list[Step], field: str, execute: Exec, check: Callable[[], None]
) -> None:
    """Run the steps in order; the first failure raises PrepareFailed. `check` runs between steps."""
    for index, step in enumerate(steps):
        check()
        label = f"{field}[{index}] ({step.describe()})"
        if isinstance(step, UploadStep):
            try:
                data = pack_as_sandbox_user(step.upload)
                sandbox.upload_packed(data, sandbox_path(sandbox.workdir, step.to))
            except (OSError, HostPathRefused, subprocess.TimeoutExpired) as exc:
                raise PrepareFailed(f"{label} failed: {exc}") from exc
            continue
        result = _run_step(sandbox.workdir, step, execute)
        if result.timed_out:
            raise PrepareFailed(f"{label} timed out\n{tail(result.stdout + result.stderr)}")
        if result.exit_code != 0:
            output = tail((result.stdout + "\n" + result.stderr).strip())
            raise PrepareFailed(f"{label} failed with exit code {result.exit_code}\n{output}")


def _run_step(workdir: str, step: Step, execute: Exec) -> ExecResult:
    if isinstance(step, RunStep):
        cwd = sandbox_path(workdir, step.cwd) if step.cwd else None
        return execute(step.run, cwd=cwd, env=step.env or None, timeout=step.timeout_s)
    if isinstance(step, WriteStep):
        path = sandbox_path(workdir, step.write)
        return execute(write_file_command(path, step.mode), stdin=step.content, timeout=60.0)
    assert isinstance(step, GitInitStep)
    return execute(git_init_command(step.options), timeout=120.0)
