"""Every import of the farm's packages is a dependency pyproject.toml declares: a module-level import a
base dependency (so `pip install rollout-farm` on a fresh machine imports every module), an import
inside a function a base dependency or one of an extra's (the code that needs it says which extra).

Two checks: the source read statically (every import, function-level ones included), and every module
really imported in a fresh interpreter where an import made by the farm's own code of anything not
declared in [project].dependencies fails, as it would in a venv holding the base install only
(third-party packages keep their own optional imports).
"""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import subprocess
import sys
import tomllib
from importlib import metadata
from pathlib import Path
from types import ModuleType

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("farm", "tasks", "handlers", "containers")
TASK_DATA = ROOT / "handlers" / "swe" / "repos"
OPTIONAL_MODULES = {"farm.chat.mistral_codec": "mistral"}
"""Modules that are themselves an extra's code, imported only when that feature is asked for."""


def _pyproject() -> dict[str, object]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]  # type: ignore[no-any-return]


def _names(requirements: list[str]) -> set[str]:
    return {canonicalize_name(Requirement(r).name) for r in requirements}


def base_distributions() -> set[str]:
    return _names(_pyproject()["dependencies"])  # type: ignore[arg-type]


def extra_distributions() -> dict[str, set[str]]:
    extras: dict[str, list[str]] = _pyproject()["optional-dependencies"]  # type: ignore[assignment]
    return {extra: _names(reqs) for extra, reqs in extras.items()}


def _sources() -> list[Path]:
    return [
        path
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if TASK_DATA not in path.parents
    ]


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(tree: ast.Module) -> list[tuple[str, bool]]:
    """(top-level name, at module level) of every absolute import; TYPE_CHECKING blocks left out."""
    found: list[tuple[str, bool]] = []

    def visit(node: ast.AST, top: bool) -> None:
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            return
        if isinstance(node, ast.Import):
            found.extend((alias.name.split(".")[0], top) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.module.split(".")[0], top))
        inner = top and not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda)
        for child in ast.iter_child_nodes(node):
            visit(child, inner)

    for statement in tree.body:
        visit(statement, True)
    return found


def test_every_import_is_declared() -> None:
    owners = metadata.packages_distributions()
    base, extras = base_distributions(), extra_distributions()
    optional = set().union(*extras.values())
    wrong: list[str] = []
    for path in _sources():
        module = _module_name(path)
        for name, top in _imports(ast.parse(path.read_text(), str(path))):
            if name in sys.stdlib_module_names or name in PACKAGES or name == "__future__":
                continue
            # Not installed here (torch without the model extra): the distribution of the same name.
            dists = {canonicalize_name(d) for d in owners.get(name, [])} or {canonicalize_name(name)}
            where = f"{path.relative_to(ROOT)} imports {name}"
            if dists & base:
                continue
            if module in OPTIONAL_MODULES and dists & extras[OPTIONAL_MODULES[module]]:
                continue
            if top:
                wrong.append(f"{where} ({', '.join(sorted(dists))}) at module level: not a base dependency")
            elif not dists & optional:
                wrong.append(f"{where} ({', '.join(sorted(dists))}): declared nowhere in pyproject.toml")
    assert not wrong, "\n".join(wrong)


def test_retry_and_flower_are_base_dependencies() -> None:
    """The two the operator's report found missing: tenacity (farm/retry.py) and Flower (the README's
    monitoring command), with the base install, not only with the test extra."""
    assert {"tenacity", "flower"} <= base_distributions()


_IMPORT_ALL = r"""
import importlib, json, pkgutil, sys
from importlib import metadata

allowed, packages, optional = json.loads(sys.argv.pop())
owners = metadata.packages_distributions()
own = tuple(packages)


class BaseInstallOnly:
    # An import made by the farm's own code of a top-level name no base dependency provides fails,
    # as in a venv with the base install only.
    def find_spec(self, name, path=None, target=None):
        top = name.split(".")[0]
        if top in sys.stdlib_module_names or top in own or "." in name:
            return None
        frame = sys._getframe(1)
        while frame is not None and frame.f_code.co_filename.startswith("<frozen"):
            frame = frame.f_back
        caller = frame.f_globals.get("__name__", "") if frame is not None else ""
        if caller.split(".")[0] in own:
            dists = {d.lower().replace("_", "-") for d in owners.get(top, [])}
            if not dists & set(allowed):
                raise ModuleNotFoundError(f"{caller} imports {top}, which no base dependency provides")
        return None


sys.meta_path.insert(0, BaseInstallOnly())
failed = {}
for package in packages:
    root = importlib.import_module(package)
    for info in pkgutil.walk_packages(root.__path__, package + "."):
        if info.name in optional or info.name.endswith(".__main__") or ".swe.repos" in info.name:
            continue
        try:
            importlib.import_module(info.name)
        except Exception as exc:
            failed[info.name] = f"{type(exc).__name__}: {exc}"
print(json.dumps(failed))
"""


@pytest.mark.slow  # imports every module (transformers, celery, fastapi...): ~30 s on a loaded machine
def test_every_module_imports_with_the_base_dependencies_only() -> None:
    argument = json.dumps([sorted(base_distributions()), list(PACKAGES), sorted(OPTIONAL_MODULES)])
    done = subprocess.run(
        [sys.executable, "-c", _IMPORT_ALL, argument],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    failed = json.loads(done.stdout.strip().splitlines()[-1])
    assert not failed, "\n".join(f"{module}: {error}" for module, error in failed.items())


def _check_extras() -> ModuleType:
    spec = importlib.util.spec_from_file_location("check_extras", ROOT / "ops" / "check_extras.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def test_the_fresh_venv_check_installs_every_extra_and_every_documented_combination() -> None:
    """ops/check_extras.py (CI's "installs" step) installs each extra pyproject declares and every
    `pip install -e '.[...]'` the README and docs show; its test lists name files that exist."""
    check = _check_extras()
    plan = check.steps("run.jsonl", "out")
    assert check.covered_extras(plan) == set(extra_distributions())  # dev: made of the others
    installs = {step.install for step in plan}
    docs = "\n".join(p.read_text() for p in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))])
    documented = set(re.findall(r"pip install -e '?(\.\[[a-z,]+\])'?", docs)) | {"."}
    for combination in documented:
        extras = set(combination.strip(".[]").split(",")) - {""}
        assert combination in installs or any(
            extras <= set((s.install or "").strip(".[]").split(",")) for s in plan
        ), f"{combination} is documented but ops/check_extras.py installs it nowhere"
    for path in [*check.TEST_EXTRA_TESTS, *check.MODEL_TESTS]:
        assert (ROOT / path).is_file(), path
