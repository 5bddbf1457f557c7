"""Writes the code sample suite (problems.jsonl) and the scripted policy's scripts for it (scripts/code.jsonl)
from suite.py.

Run `python -m handlers.code.build_suite` after changing suite.py; the output is committed. `--check`
also runs every reference and wrong solution against its hidden tests (plain subprocesses) and fails
unless each reference passes and each wrong solution fails.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

from handlers.code.grading import RUNNER_SOURCE, TestReport, list_tests, parse_report, runner_request
from handlers.code.prompting import SOLUTION_PATH
from handlers.code.suite import PROBLEMS, Problem

HERE = Path(__file__).parent
PROBLEMS_FILE = HERE / "problems.jsonl"
SCRIPTS_FILE = HERE / "scripts" / "code.jsonl"


def instance(problem: Problem) -> dict[str, Any]:
    """The problem as a `code` instance (add "handler": "code" to submit it)."""
    out: dict[str, Any] = {
        "id": f"code-{problem.slug}",
        "prompt": problem.prompt,
        "entry_point": problem.entry_point,
        "hidden_tests": problem.hidden_tests,
    }
    if problem.public_tests is not None:
        out["public_tests"] = problem.public_tests
    if problem.starter_code is not None:
        out["starter_code"] = problem.starter_code
    return out


def match(problem: Problem) -> str:
    """What the scripted policy looks for in the first user message: the prompt's first line."""
    return problem.prompt.split("\n", 1)[0]


def _call(tool: str, say: str = "", **arguments: Any) -> dict[str, Any]:
    step: dict[str, Any] = {"tool": tool, "arguments": arguments}
    if say:
        step["say"] = say
    return step


def _create(text: str) -> dict[str, Any]:
    return _call("editor", "I'll write the solution.", command="create", path=SOLUTION_PATH, file_text=text)


def _replace(old: str, new: str) -> dict[str, Any]:
    return _call("editor", command="str_replace", path=SOLUTION_PATH, old_str=old, new_str=new)


def _finish(problem: Problem) -> dict[str, Any]:
    return _call("finish", answer=f"Implemented `{problem.entry_point}` in {SOLUTION_PATH}.")


def script(problem: Problem) -> dict[str, Any]:
    """Success path (`steps`) and failure path (`wrong_steps`) for the scripted reference policy."""
    check = _call("bash", command=problem.check)
    if problem.kind == "write":
        steps = [_create(problem.solution), check, _finish(problem)]
        wrong = [_create(problem.wrong), check, _finish(problem)]
    elif problem.kind == "fix":
        assert problem.edit is not None
        start = [_create(problem.wrong), check]
        steps = [*start, _replace(*problem.edit), check, _finish(problem)]
        wrong = [*start, _finish(problem)]
    else:
        assert problem.edit is not None and problem.wrong_edit is not None
        view = _call("editor", "Let me look at the starter code.", command="view", path=SOLUTION_PATH)
        done = {"say": f"I completed `{problem.entry_point}` in {SOLUTION_PATH}."}
        steps = [view, _replace(*problem.edit), check, done]
        wrong = [view, _replace(*problem.wrong_edit), check, done]
    return {"match": match(problem), "steps": steps, "wrong_steps": wrong}


def consistency_errors(problems: list[Problem]) -> list[str]:
    """What is wrong with the suite's own definitions (no code is run)."""
    errors = []
    slugs = [p.slug for p in problems]
    if len(set(slugs)) != len(slugs):
        errors.append("duplicate slugs")
    matches = [match(p) for p in problems]
    for p, m in zip(problems, matches, strict=True):
        if any(m in other.prompt for other in problems if other is not p):
            errors.append(f"{p.slug}: its match is part of another prompt")
        if not list_tests(p.hidden_tests):
            errors.append(f"{p.slug}: no hidden tests")
        if p.solution == p.wrong:
            errors.append(f"{p.slug}: the wrong solution is the reference")
        if p.kind == "fix" and (p.edit is None or p.wrong.count(p.edit[0]) != 1):
            errors.append(f"{p.slug}: the fix's old_str must occur exactly once in the draft")
        elif p.kind == "fix" and p.wrong.replace(*p.edit) != p.solution:  # type: ignore[misc]
            errors.append(f"{p.slug}: the fix does not turn the draft into the reference")
        if p.kind == "complete":
            start = p.starter_code or ""
            for name, edit, target in (("edit", p.edit, p.solution), ("wrong_edit", p.wrong_edit, p.wrong)):
                if edit is None or start.count(edit[0]) != 1 or start.replace(*edit) != target:
                    errors.append(f"{p.slug}: {name} does not turn the starter into its solution")
    return errors


def run_tests_locally(tests: str, solution: str, budget_s: float = 20.0) -> TestReport:
    """The hidden tests against `solution` in a plain subprocess (no sandbox): for checking the suite."""
    names = list_tests(tests)
    with tempfile.TemporaryDirectory(prefix="code-suite-") as tmp:
        Path(tmp, "solution.py").write_text(solution, encoding="utf-8")
        request = runner_request(tests, names, tmp, budget_s)
        try:
            done = subprocess.run(
                [sys.executable, "-I", "-c", RUNNER_SOURCE],
                input=json.dumps(request),
                capture_output=True,
                text=True,
                cwd=tmp,
                timeout=budget_s + 10,
            )
        except subprocess.TimeoutExpired as exc:
            out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else exc.stdout or ""
            return parse_report(out, request["nonce"], names, timed_out=True)
    return parse_report(done.stdout, request["nonce"], names, exit_code=done.returncode, stderr=done.stderr)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--check", action="store_true", help="also run every solution against its tests")
    args = parser.parse_args()
    errors = consistency_errors(PROBLEMS)
    if args.check:
        for p in PROBLEMS:
            good = run_tests_locally(p.hidden_tests, p.solution)
            bad = run_tests_locally(p.hidden_tests, p.wrong)
            if good.reward != 1.0:
                errors.append(f"{p.slug}: the reference fails: {good.failure_log()}")
            if bad.reward != 0.0:
                errors.append(f"{p.slug}: the wrong solution passes")
    if errors:
        sys.exit("\n".join(errors))
    PROBLEMS_FILE.write_text("".join(json.dumps(instance(p)) + "\n" for p in PROBLEMS), encoding="utf-8")
    SCRIPTS_FILE.parent.mkdir(exist_ok=True)
    SCRIPTS_FILE.write_text("".join(json.dumps(script(p)) + "\n" for p in PROBLEMS), encoding="utf-8")
    print(f"wrote {len(PROBLEMS)} problems")


if __name__ == "__main__":
    main()
