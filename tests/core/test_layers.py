"""The dependency picture stays a picture: containers stand alone, the farm core knows no handler, task,
API or CLI, handlers know no task or API, and no package's modules import each other in a circle. The
contracts live in pyproject.toml ([tool.importlinter]); this runs them with import-linter itself."""

from __future__ import annotations

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
    (acyclic,) = [c for c in contracts if c["type"] == "acyclic_siblings"]
    assert set(acyclic["ancestors"]) == {"containers", "farm", "handlers", "tasks"}
    assert all(rule.startswith("farm.api.app -> ") for rule in acyclic.get("ignore_imports", []))
