"""The dependency picture stays a picture: containers stand alone, the farm core knows no handler, task,
API or CLI, handlers know no task or API, and no package's modules import each other in a circle. The
contracts live in pyproject.toml ([tool.importlinter]); this runs them with import-linter itself."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def test_import_contracts_are_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    from importlinter.cli import lint_imports

    monkeypatch.chdir(ROOT)
    monkeypatch.setenv("PYTHONPATH", str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    assert lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True) == 0
