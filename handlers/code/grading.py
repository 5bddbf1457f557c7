"""Grading for `code`: which tests a test module defines, the runner's request, and reading the runner's
report into per-test outcomes, a pass fraction and a short failure log (see runner.py for the protocol)."""

from __future__ import annotations

import ast
import json
import uuid
from pathlib import Path
from typing import Any

from pydantic import BaseModel

RUNNER_SOURCE = Path(__file__).with_name("runner.py").read_text(encoding="utf-8")
RUNNER_CHILD_SOURCE = Path(__file__).with_name("runner_child.py").read_text(encoding="utf-8")
"""The runner's solution-side process (it imports the solution; the verdict stays in the runner)."""
FAILURE_LOG_CHARS = 1500


def list_tests(source: str) -> list[str]:
    """Top-level `test*` functions of a test module, in definition order. Raises SyntaxError."""
    tree = ast.parse(source)
    return list(
        dict.fromkeys(
            node.name
            for node in tree.body
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test")
        )
    )


def runner_request(tests: str, names: list[str], solution_dir: str, budget_s: float) -> dict[str, Any]:
    """The runner's stdin, with a fresh nonce that tags its result lines and its child's source."""
    return {
        "nonce": uuid.uuid4().hex,
        "tests": tests,
        "names": names,
        "solution_dir": solution_dir,
        "budget_s": budget_s,
        "child": RUNNER_CHILD_SOURCE,
    }


class TestOutcome(BaseModel):
    __test__ = False  # not a pytest class

    name: str
    ok: bool
    error: str | None = None
    seconds: float = 0.0


class TestReport(BaseModel):
    __test__ = False

    outcomes: list[TestOutcome]
    """One per expected test, in order; tests the runner never reported count as failed."""
    collect_error: str | None = None
    finished: bool = False
    """The runner got to its end (it was not killed, and did not crash)."""
    timed_out: bool = False
    """The whole run was killed at its timeout."""
    note: str | None = None
    """Why nothing or not everything ran (no solution, a dead sandbox, a crashed runner)."""
    sandbox_lost: bool = False
    """The sandbox died under the tests (its execution server gone): nothing was graded."""

    @property
    def total(self) -> int:
        return len(self.outcomes)

    @property
    def passed(self) -> int:
        return sum(o.ok for o in self.outcomes)

    @property
    def fraction(self) -> float:
        return self.passed / self.total if self.total else 0.0

    @property
    def reward(self) -> float:
        return 1.0 if self.total and self.passed == self.total else 0.0

    def failure_log(self, limit: int = FAILURE_LOG_CHARS) -> str:
        lines = [self.note] if self.note else []
        if self.collect_error:
            lines.append(f"could not load the tests: {self.collect_error}")
        lines += [f"{o.name}: {o.error}" for o in self.outcomes if not o.ok and not self.collect_error]
        text = "\n".join(lines)
        return text if len(text) <= limit else text[: limit - 20] + "\n[... log truncated]"

    def metadata(self) -> dict[str, Any]:
        return {
            "tests_passed": self.passed,
            "tests_total": self.total,
            "pass_fraction": round(self.fraction, 4),
            "tests_timed_out": self.timed_out,
            "failure_log": self.failure_log(),
        }

    @classmethod
    def not_run(cls, names: list[str], why: str) -> TestReport:
        return cls(outcomes=[TestOutcome(name=n, ok=False, error="not run") for n in names], note=why)


def parse_report(
    stdout: str,
    nonce: str,
    names: list[str],
    *,
    timed_out: bool = False,
    exit_code: int | None = 0,
    stderr: str = "",
) -> TestReport:
    """Reads the runner's tagged lines; anything else in stdout (or a forged line) is ignored."""
    reported: dict[str, TestOutcome] = {}
    collect_error: str | None = None
    finished = False
    prefix = nonce + " "
    for line in stdout.splitlines():
        if not line.startswith(prefix):
            continue
        try:
            event = json.loads(line[len(prefix) :])
        except ValueError:
            continue
        if not isinstance(event, dict):
            continue
        if event.get("done") is True:
            finished = True
        elif "collect_error" in event:
            collect_error = str(event["collect_error"])
        elif event.get("test") in names and event["test"] not in reported:
            reported[event["test"]] = TestOutcome(
                name=event["test"],
                ok=event.get("ok") is True,
                error=None if event.get("ok") is True else str(event.get("error")),
                seconds=float(event.get("seconds") or 0.0),
            )
    note = None
    if timed_out:
        note = "the test run was killed at its timeout"
    elif not finished:
        detail = stderr.strip().splitlines()[-1:] if stderr.strip() else []
        note = f"the test process ended early (exit code {exit_code})" + (
            f": {detail[0][:300]}" if detail else ""
        )
    missing = "not run: " + (note or "no result") if not collect_error else "not run"
    outcomes = [reported.get(n) or TestOutcome(name=n, ok=False, error=missing) for n in names]
    return TestReport(
        outcomes=outcomes, collect_error=collect_error, finished=finished, timed_out=timed_out, note=note
    )
