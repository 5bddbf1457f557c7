"""No function of the farm's core or of its handlers is over 60 lines (issue 18: a function one can hold
in one's head). The swe sample repositories under handlers/ are task data, not farm code."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("farm", "containers", "tasks", "handlers")
DATA = ROOT / "handlers" / "swe" / "repos"
LIMIT = 60


def test_no_function_is_over_60_lines() -> None:
    long = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if path.is_relative_to(DATA):
                continue
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    length = (node.end_lineno or node.lineno) - node.lineno + 1
                    if length > LIMIT:
                        long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({length} lines)")
    assert not long, "\n".join(long)
