"""Reading the hidden-test runner's report: pure logic, no processes."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from handlers.code.grading import TestReport, list_tests, parse_report, runner_request

NONCE = "n0nce"


def line(event: dict, nonce: str = NONCE) -> str:
    return f"{nonce} {json.dumps(event)}"


def test_names_are_top_level_test_functions_in_order() -> None:
    source = """
import os

def helper():
    def test_nested():
        pass

def test_b():
    pass

class TestC:
    def test_method(self):
        pass

async def test_async():
    pass

def test_a():
    pass

def test_b():
    pass

test_value = 3
"""
    assert list_tests(source) == ["test_b", "test_a"]
    with pytest.raises(SyntaxError):
        list_tests("def test_x(:\n")


def test_request_carries_a_fresh_nonce() -> None:
    first, second = (runner_request("t", ["test_a"], "/w", 5.0) for _ in range(2))
    assert first["nonce"] != second["nonce"] and len(first["nonce"]) >= 32
    assert first["names"] == ["test_a"] and first["budget_s"] == 5.0 and first["solution_dir"] == "/w"


@given(
    outcomes=st.lists(st.booleans(), min_size=1, max_size=12),
    reported=st.data(),
    noise=st.lists(st.text(max_size=40), max_size=5),
    finished=st.booleans(),
)
def test_counts_follow_the_reported_lines(
    outcomes: list[bool], reported: st.DataObject, noise: list[str], finished: bool
) -> None:
    names = [f"test_{i}" for i in range(len(outcomes))]
    shown = reported.draw(st.lists(st.sampled_from(names), unique=True))
    lines = [*noise]
    for name in shown:
        ok = outcomes[names.index(name)]
        lines.append(
            line({"test": name, "ok": ok, "error": None if ok else "AssertionError", "seconds": 0.1})
        )
        # a forged line (wrong nonce) and a repeat never change a reported outcome
        lines.append(line({"test": name, "ok": not ok, "error": None}, nonce="forged"))
        lines.append(line({"test": name, "ok": not ok, "error": None}))
    if finished:
        lines.append(line({"done": True}))
    report = parse_report("\n".join(lines), NONCE, names, exit_code=0 if finished else -9)
    expected_passed = sum(outcomes[names.index(n)] for n in shown)
    assert report.total == len(names)
    assert report.passed == expected_passed
    assert report.fraction == pytest.approx(expected_passed / len(names))
    assert report.reward == (1.0 if expected_passed == len(names) else 0.0)
    assert report.finished is finished
    assert [o.name for o in report.outcomes] == names
    for outcome in report.outcomes:
        if outcome.name not in shown:
            assert not outcome.ok and outcome.error and outcome.error.startswith("not run")
    if not finished:
        assert "exit code -9" in (report.note or "")


def test_collect_error_fails_every_test() -> None:
    out = "\n".join([line({"collect_error": "ImportError: cannot import name 'f'"}), line({"done": True})])
    report = parse_report(out, NONCE, ["test_a", "test_b"])
    assert report.passed == 0 and report.total == 2 and report.reward == 0.0
    assert report.failure_log() == "could not load the tests: ImportError: cannot import name 'f'"


def test_timeout_keeps_results_so_far() -> None:
    out = line({"test": "test_a", "ok": True, "error": None, "seconds": 0.0})
    report = parse_report(out, NONCE, ["test_a", "test_b"], timed_out=True, exit_code=-9)
    assert report.timed_out and not report.finished
    assert [o.ok for o in report.outcomes] == [True, False]
    assert report.metadata()["tests_timed_out"] is True
    assert report.metadata()["pass_fraction"] == 0.5
    assert "killed at its timeout" in report.failure_log()


def test_crash_note_quotes_the_last_stderr_line() -> None:
    report = parse_report(
        "", NONCE, ["test_a"], exit_code=1, stderr="Traceback...\nValueError: bad request\n"
    )
    assert report.note == "the test process ended early (exit code 1): ValueError: bad request"


def test_garbage_after_the_nonce_is_ignored() -> None:
    out = "\n".join([f"{NONCE} not json", f"{NONCE} [1, 2]", line({"test": "test_zzz", "ok": True})])
    report = parse_report(out, NONCE, ["test_a"])
    assert report.passed == 0 and report.total == 1


def test_an_empty_test_list_never_rewards() -> None:
    report = parse_report(line({"done": True}), NONCE, [])
    assert report.total == 0 and report.reward == 0.0 and report.fraction == 0.0


def test_failure_log_is_bounded() -> None:
    names = [f"test_{i}" for i in range(200)]
    out = "\n".join(line({"test": n, "ok": False, "error": "AssertionError: " + "x" * 100}) for n in names)
    log = parse_report(out, NONCE, names).failure_log(limit=500)
    assert len(log) <= 500 and log.endswith("[... log truncated]")


def test_not_run_report() -> None:
    report = TestReport.not_run(["test_a", "test_b"], "/workspace/solution.py was not written")
    assert report.reward == 0.0 and report.total == 2
    assert report.failure_log().startswith("/workspace/solution.py was not written")
