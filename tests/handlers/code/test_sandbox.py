"""The handler's sandbox work in real (bubblewrap) sandboxes: starter files, reading the solution back,
and grading, including solutions that loop in C code or kill every process of their sandbox."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from containers.local import LocalRuntime
from containers.sandbox import Sandbox
from containers.spec import SandboxSpec
from handlers.code import CodeInstance
from handlers.code.build_suite import instance
from handlers.code.grading import list_tests
from handlers.code.handler import MAX_SOLUTION_BYTES, read_solution, run_hidden_tests, write_files
from handlers.code.prompting import starter_files
from handlers.code.suite import PROBLEMS
from tests.handlers.code.test_runner import FORGE_VIA_GC, FORGE_VIA_PROC, PATCH_THE_TESTS

TESTS = """from solution import f


def test_one():
    assert f(1) == 2


def test_two():
    assert f(2) == 3
"""
NAMES = list_tests(TESTS)


@pytest.fixture
def sandbox(runtime: LocalRuntime) -> Iterator[Sandbox]:
    with runtime.start(SandboxSpec()) as started:
        yield started


def test_public_tests_run_in_the_sandbox(sandbox: Sandbox) -> None:
    problem = next(p for p in PROBLEMS if p.kind == "fix")
    inst = CodeInstance.model_validate({"handler": "code", **instance(problem)})
    write_files(sandbox, {**starter_files(inst), "solution.py": problem.wrong})
    failing = sandbox.exec("python3 test_public.py", timeout=30)
    assert failing.exit_code == 1 and "FAIL test_" in failing.stdout, failing
    write_files(sandbox, {"solution.py": problem.solution})
    passing = sandbox.exec("python3 test_public.py", timeout=30)
    assert passing.exit_code == 0 and "FAIL" not in passing.stdout, passing


def test_read_solution(sandbox: Sandbox) -> None:
    assert read_solution(sandbox) == (None, "/workspace/solution.py was not written")
    sandbox.tool("editor", command="create", path="/workspace/solution.py", file_text="x = 'é'\n")
    assert read_solution(sandbox) == ("x = 'é'\n", None)
    sandbox.exec(f"head -c {MAX_SOLUTION_BYTES + 1} /dev/zero | tr '\\0' a > solution.py")
    source, why = read_solution(sandbox)
    assert source is None and why is not None and "larger than" in why
    sandbox.exec("rm solution.py && mkdir solution.py")
    assert read_solution(sandbox)[0] is None


@pytest.mark.parametrize(
    ("solution", "reward", "passed"),
    [
        ("def f(x):\n    return x + 1\n", 1.0, 2),
        ("def f(x):\n    return 2\n", 0.0, 1),
        ("def f(x):\n    return x + 1 if x == 1 else sum(range(10**12))\n", 0.0, 1),  # a loop in C
        ("import os, signal\n\ndef f(x):\n    os.kill(-1, signal.SIGKILL)\n", 0.0, 0),
        ("import os\nos._exit(3)\n", 0.0, 0),
        # Wrong solutions forging passes (issue 34, item 8); the /proc one succeeds if the runner is dumpable.
        (FORGE_VIA_GC, 0.0, 0),
        (PATCH_THE_TESTS, 0.0, 0),
        (FORGE_VIA_PROC, 0.0, 0),
    ],
    ids=[
        "correct",
        "wrong",
        "c-loop",
        "kills-sandbox",
        "exits-on-import",
        "forge-gc",
        "patch-tests",
        "forge-proc",
    ],
)
def test_grading_in_a_fresh_sandbox(runtime: LocalRuntime, solution: str, reward: float, passed: int) -> None:
    started = time.monotonic()
    with runtime.start(SandboxSpec()) as sandbox:
        report = run_hidden_tests(sandbox, TESTS, NAMES, solution, budget_s=2.0, grace_s=2.0)
    assert time.monotonic() - started < 15
    assert (report.reward, report.passed, report.total) == (reward, passed, 2), report
    if reward == 0.0:
        assert report.failure_log()
