"""Per-test outcomes from the short test summary that `pytest -rA` prints.

Summary lines look like `PASSED tests/test_a.py::test_x[p]` or `FAILED tests/test_a.py::test_y - msg`.
Node ids may contain spaces and " - ", so a line is matched against the ids we ask about (longest id
first) rather than split. Only the last summary section counts (output printed by the code under test
before it cannot pose as results), and a test reported more than once (a teardown error after a pass)
keeps its worst outcome.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

STATUSES = ("PASSED", "FAILED", "ERROR", "XFAIL", "XPASS", "SKIPPED")
PASSING = frozenset({"PASSED", "XFAIL"})
"""As SWE-bench grades: an expected failure counts as passing, a skip does not."""
MISSING = "MISSING"
_SEVERITY = {"ERROR": 4, "FAILED": 3, "SKIPPED": 2, "XPASS": 1, "XFAIL": 0, "PASSED": 0}
_HEADER = re.compile(r"^=+ short test summary info =+$")
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")


def summary_lines(log: str) -> list[tuple[str, str]]:
    """(status, rest of line) for each result line of the last summary section (all lines if none)."""
    # Split on newlines only: str.splitlines() would also break at characters a node id may hold.
    lines = [_ANSI.sub("", line).rstrip("\r") for line in log.split("\n")]
    starts = [i for i, line in enumerate(lines) if _HEADER.match(line.strip())]
    if starts:
        lines = lines[starts[-1] + 1 :]
    found = []
    for line in lines:
        status, _, rest = line.partition(" ")
        if status in STATUSES and rest:
            found.append((status, rest))
    return found


def _matches(rest: str, test_id: str) -> bool:
    return rest == test_id or rest.startswith(test_id + " - ") or rest.startswith(test_id + " ")


def outcomes(log: str, test_ids: Iterable[str]) -> dict[str, str]:
    """Each asked id's status (one of STATUSES, or MISSING when the summary does not mention it)."""
    wanted = list(dict.fromkeys(test_ids))
    by_length = sorted(wanted, key=len, reverse=True)
    exact = set(wanted)
    result = dict.fromkeys(wanted, MISSING)
    for status, rest in summary_lines(log):
        if rest in exact:
            test_id: str | None = rest
        else:
            test_id = next((t for t in by_length if _matches(rest, t)), None)
        if test_id is None:
            continue
        previous = result[test_id]
        if previous == MISSING or _SEVERITY[status] > _SEVERITY[previous]:
            result[test_id] = status
    return result


def passed(status: str) -> bool:
    return status in PASSING


def files_of(test_ids: Iterable[str]) -> list[str]:
    """The files holding the given node ids, in first-seen order (what the evaluator runs)."""
    return list(dict.fromkeys(test_id.split("::", 1)[0] for test_id in test_ids))
