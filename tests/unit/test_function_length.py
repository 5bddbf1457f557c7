"""No function of the farm's core is over 60 lines (issue 18: a function one can hold in one's head).
`handlers/` is not held to it yet."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CORE = ("farm", "containers", "tasks")
LIMIT = 60


def test_no_core_function_is_over_60_lines() -> None:
    long = []
    for package in CORE:
        for path in sorted((ROOT / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    length = (node.end_lineno or node.lineno) - node.lineno + 1
                    if length > LIMIT:
                        long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({length} lines)")
    assert not long, "\n".join(long)
