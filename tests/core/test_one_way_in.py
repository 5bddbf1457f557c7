"""One import path per public concept: no module of the farm is a re-export shim (a module whose whole body
is imports, kept so an old path still resolves). A package's __init__ may gather its public names; any
other module that only re-exports is a second door to something that lives elsewhere."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("containers", "farm", "handlers", "tasks")


def _is_shim(tree: ast.Module) -> bool:
    body = [
        node
        for node in tree.body
        if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))  # docstring
    ]

    def reexport(node: ast.stmt) -> bool:
        if isinstance(node, ast.Import | ast.ImportFrom):
            return True
        return isinstance(node, ast.Assign) and any(
            isinstance(target, ast.Name) and target.id == "__all__" for target in node.targets
        )

    return bool(body) and all(reexport(node) for node in body)


def test_no_module_is_a_reexport_shim() -> None:
    shims = [
        str(path.relative_to(ROOT))
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if path.name != "__init__.py"
        and "repos" not in path.parts
        and _is_shim(ast.parse(path.read_text(), str(path)))
    ]
    assert shims == []


def test_the_handler_contract_has_one_home() -> None:
    """The protocol, the job context and the registry live in farm/handler/ only (handlers/ implements it)."""
    for gone in ("base.py", "context.py", "registry.py"):
        assert not (ROOT / "handlers" / gone).exists()
