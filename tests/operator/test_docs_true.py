"""The README and the docs it points to name only paths and settings that exist: every repository path in
backticks is a file or directory of the tree, and every FARM_* variable is read by the code."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = (
    "README.md",
    "docs/CONTRACT.md",
    "docs/ARCHITECTURE.md",
    "docs/RUNNING.md",
    "docs/TRAINERS.md",
    "docs/HANDLERS.md",
    "docs/TOKENIZERS.md",
    "docs/SECURITY.md",
    "docs/DEVELOPMENT.md",
    "docs/PERFORMANCE.md",
    "docs/SCALE.md",
)
TOP = ("farm/", "tasks/", "handlers/", "containers/", "bench/", "ops/", "compose/", "docs/", "tests/", ".ci/")
CODE_DIRS = ("farm", "tasks", "handlers", "containers", "bench", "ops", "compose", "tests", ".ci")


def _backticked(text: str) -> list[str]:
    return re.findall(r"`([^`\n]+)`", text)


def named_paths(text: str) -> set[str]:
    found = set()
    for quoted in _backticked(text):
        for token in quoted.split():
            token = token.strip(",;:()'\"")
            token = re.split(r"::|:(?=[A-Za-z_])", token)[0]  # module:function, file::test
            if token.startswith(TOP) and not any(c in token for c in "*<>{}$"):
                found.add(token.rstrip("/"))
    return found


def _code_text() -> str:
    parts = []
    for directory in CODE_DIRS:
        for path in (ROOT / directory).rglob("*"):
            readable = path.suffix in {".py", ".sh", ".yml", ".yaml", ".toml", ".service", ".def", ""}
            if path.is_file() and readable and "swe/repos" not in str(path):
                parts.append(path.read_text(errors="replace"))
    return "\n".join(parts)


@pytest.mark.parametrize("doc", DOCS)
def test_every_path_named_exists(doc: str) -> None:
    missing = sorted(p for p in named_paths((ROOT / doc).read_text()) if not (ROOT / p).exists())
    assert not missing, f"{doc} names paths that do not exist: {missing}"


@pytest.mark.parametrize("doc", DOCS)
def test_every_setting_named_is_read_by_the_code(doc: str) -> None:
    from farm.settings import Settings

    fields = {f"FARM_{name.upper()}" for name in Settings.model_fields}
    code = _code_text()
    named = set(re.findall(r"\bFARM_[A-Z0-9_]*[A-Z0-9]\b", (ROOT / doc).read_text()))
    unknown = sorted(n for n in named if n not in fields and n not in code.replace(f"{doc}", ""))
    assert not unknown, f"{doc} names settings nothing reads: {unknown}"
