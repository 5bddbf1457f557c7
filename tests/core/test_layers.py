"""The dependency picture stays a picture: containers stand alone, the farm core knows no handler, task,
API or CLI, handlers know no task or API, the viewer knows not the REST facade, the handler contract knows
not the farm's own agent, and no package's modules import each other in a circle. The contracts live in
pyproject.toml ([tool.importlinter]); this runs them with import-linter itself."""

from __future__ import annotations

import ast
import os
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_import_contracts_are_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    from importlinter.cli import lint_imports

    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("PYTHONPATH", str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    assert lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True) == 0


def test_the_rules_of_issue_18_are_among_the_contracts() -> None:
    """Keeping the contracts proves little if they were weakened; pin the rules the issue asks for."""

    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    forbidden = {
        tuple(c["source_modules"]): set(c["forbidden_modules"]) for c in contracts if c["type"] == "forbidden"
    }
    assert {"farm", "handlers", "tasks"} <= forbidden[("containers",)]
    assert {"tasks", "farm.api", "farm.cli"} <= forbidden[("handlers",)]
    core = next(
        rule for sources, rule in forbidden.items() if {"farm.jobs", "farm.agent", "farm.web"} <= set(sources)
    )
    assert {"handlers", "tasks", "farm.api", "farm.gateway", "farm.ui", "farm.cli"} <= core
    assert {"farm.api", "farm.ui"} <= forbidden[("farm.gateway",)]
    assert "farm.api" in forbidden[("farm.ui",)]  # no back-up arrow: the API mounts the viewer
    assert {"farm.agent", "farm.jobs.store"} <= forbidden[("farm.handler",)]
    (acyclic,) = [c for c in contracts if c["type"] == "acyclic_siblings"]
    assert set(acyclic["ancestors"]) == {"containers", "farm", "handlers", "tasks"}
    assert all(rule.startswith("farm.api.app -> ") for rule in acyclic.get("ignore_imports", []))


def test_the_handler_contract_names_no_agent_even_in_types() -> None:
    """import-linter skips annotation-only imports (exclude_type_checking_imports); the handler contract
    must not name farm.agent there either: a handler's model client is farm.handler's TokenGenerator."""
    named = [
        f"{path.name}: {node.module}"
        for path in sorted((ROOT / "farm" / "handler").glob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("farm.agent")
    ]
    assert named == []
