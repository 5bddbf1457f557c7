"""Prepare steps: parsing (errors name the step), and running them in order through an exec function."""

from __future__ import annotations

import base64
import io
import shutil
import tarfile
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from containers.results import ExecResult
from farm.settings import get_settings
from handlers.harness.prepare import (
    GitInitStep,
    PrepareFailed,
    RunStep,
    UploadStep,
    WriteStep,
    parse_steps,
    run_steps,
    sandbox_path,
)
from handlers.host_files import PROJECT_DATA


@pytest.fixture
def task_data(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Iterator[str]:
    """A copy of the project's sample repository where the sandbox's user may read it, inside an allowed
    root: the clone itself may sit under a home the sandbox's user cannot enter (a fresh `git clone` in
    /root), and pytest's own temporary folders are private to this user."""
    root = Path(tempfile.mkdtemp(prefix="farm-task-data-"))
    root.chmod(0o755)
    shutil.copytree(f"{PROJECT_DATA}/swe/repos/textkit", root / "textkit")
    monkeypatch.setenv("FARM_HOST_FILE_ROOTS", str(root))
    get_settings.cache_clear()
    yield str(root / "textkit")
    get_settings.cache_clear()
    shutil.rmtree(root, ignore_errors=True)


def test_forms_of_steps(task_data: str) -> None:
    steps = parse_steps(
        [
            "pip install -e .",
            {"run": "make", "cwd": "src", "timeout_s": 30, "env": {"A": "1"}},
            {"write": "a/b.py", "content": "x = 1\n", "mode": "644"},
            {"git_init": True},
            {"git_init": {"commit": False}},
            {"upload": task_data, "to": "repo"},
        ],
        "runtime.prepare",
    )
    assert [type(s) for s in steps] == [RunStep, RunStep, WriteStep, GitInitStep, GitInitStep, UploadStep]
    assert steps[0] == RunStep(run="pip install -e .")
    assert isinstance(steps[4], GitInitStep) and steps[4].options.commit is False
    assert isinstance(steps[3], GitInitStep) and steps[3].options.message == "base"


@pytest.mark.parametrize(
    ("step", "hint"),
    [
        ({"wirte": "x", "content": ""}, "exactly one"),
        ({"write": "x"}, "content"),
        ({"run": "ls", "write": "x", "content": ""}, "exactly one"),
        ({"git_init": False}, "git_init"),
        ({"upload": "relative/path"}, "absolute"),
        ({"run": "ls", "timeout_s": -1}, "timeout_s"),
        ({"write": "x", "content": "", "mode": "999"}, "mode"),
        (17, "a command string or an object"),
    ],
)
def test_bad_steps_name_their_index(step: Any, hint: str) -> None:
    with pytest.raises(ValueError, match=r"runtime\.prepare\[1\]") as caught:
        parse_steps(["true", step], "runtime.prepare")
    assert hint in str(caught.value)


def test_not_a_list() -> None:
    with pytest.raises(ValueError, match="must be a list"):
        parse_steps({"run": "x"}, "prepare")  # type: ignore[arg-type]


@given(st.lists(st.text(min_size=1), max_size=5))
def test_strings_are_commands(commands: list[str]) -> None:
    assert [s.run for s in parse_steps(commands, "prepare")] == commands  # type: ignore[union-attr]


@dataclass
class FakeSandbox:
    workdir: str = "/workspace"
    uploads: list[tuple[str, str]] = field(default_factory=list)

    def upload_packed(self, data: str, remote: str) -> None:
        with tarfile.open(fileobj=io.BytesIO(base64.b64decode(data))) as archive:
            self.uploads.append((archive.getnames()[0], remote))


@dataclass
class Recorder:
    fail_at: int | None = None
    timed_out_at: int | None = None
    calls: list[dict[str, Any]] = field(default_factory=list)

    def __call__(self, cmd: str, **kwargs: Any) -> ExecResult:
        index = len(self.calls)
        self.calls.append({"cmd": cmd, **kwargs})
        code = 2 if index == self.fail_at else 0
        return ExecResult(
            stdout="out\n",
            stderr="boom" if code else "",
            exit_code=code,
            timed_out=index == self.timed_out_at,
            duration_s=0.0,
        )


def test_run_steps_in_order_with_paths_in_the_workdir(task_data: str) -> None:
    sandbox, execute, checks = FakeSandbox(), Recorder(), []
    steps = parse_steps(
        [
            {"run": "make", "cwd": "src", "env": {"A": "1"}},
            {"write": "pkg/x.py", "content": "X = 1\n"},
            {"upload": task_data, "to": "data"},
            {"git_init": True},
        ],
        "prepare",
    )
    run_steps(sandbox, steps, "prepare", execute, lambda: checks.append(1))  # type: ignore[arg-type]
    assert len(checks) == 4
    make, written, git = execute.calls
    assert make["cmd"] == "make" and make["cwd"] == "/workspace/src" and make["env"] == {"A": "1"}
    assert "/workspace/pkg/x.py" in written["cmd"] and written["stdin"] == "X = 1\n"
    assert "git init" in git["cmd"] and "commit" in git["cmd"]
    assert sandbox.uploads == [("textkit", "/workspace/data")]


def test_first_failure_stops_and_names_the_step() -> None:
    execute = Recorder(fail_at=1)
    steps = parse_steps(["true", {"run": "make test"}, "never"], "runtime.prepare")
    with pytest.raises(
        PrepareFailed, match=r"runtime\.prepare\[1\] \(run 'make test'\) failed with exit code 2"
    ):
        run_steps(FakeSandbox(), steps, "runtime.prepare", execute, lambda: None)  # type: ignore[arg-type]
    assert len(execute.calls) == 2


def test_timeouts_and_missing_uploads_fail_clearly() -> None:
    with pytest.raises(PrepareFailed, match="timed out"):
        run_steps(FakeSandbox(), parse_steps(["sleep 9"], "p"), "p", Recorder(timed_out_at=0), lambda: None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"p\[0\]\.upload: /definitely/not/here does not exist"):
        parse_steps([{"upload": "/definitely/not/here"}], "p")


def test_interruption_between_steps_propagates() -> None:
    def check() -> None:
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        run_steps(FakeSandbox(), parse_steps(["true"], "p"), "p", Recorder(), check)  # type: ignore[arg-type]


def test_sandbox_paths() -> None:
    assert sandbox_path("/workspace", "a/../b") == "/workspace/b"
    assert sandbox_path("/workspace", "/etc/x") == "/etc/x"
