"""Paths into ops/ shared by the checks of the operations files."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

OPS = Path(__file__).resolve().parents[2] / "ops"


def tool(name: str) -> str:
    """The path of a command-line validator, or skip when this machine does not have it."""
    found = shutil.which(name)
    if found is None:
        pytest.skip(f"{name} is not installed (apt-get install -y {name})")
    return found
