"""The handler contract (farm/handler/) from a handler package's side: one way in, the
`rollout_farm.handlers` entry point group, which the built-ins use like any third-party package
(pyproject.toml); and what importing the contract brings along (no job store, no Redis client)."""

from __future__ import annotations

import json
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_a_fresh_process_finds_every_built_in_handler_through_its_entry_point() -> None:
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]
    table = declared["rollout_farm.handlers"]
    probe = (
        "import json, sys\n"
        "from farm.handler.registry import get_handler, names\n"
        "before = sorted(m for m in sys.modules if m == 'handlers' or m.startswith('handlers.'))\n"
        "found = {n: f'{type(get_handler(n)).__module__}:{type(get_handler(n)).__name__}' for n in names()}\n"
        "print(json.dumps({'before': before, 'found': found}))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT)
    seen = json.loads(out.stdout)
    assert seen["before"] == []  # nothing imported a handler module to register it
    for name, target in table.items():
        module, cls = target.split(":")
        assert seen["found"][name].endswith(f":{cls}") and seen["found"][name].startswith(module)


def test_no_handler_registers_itself_on_import() -> None:
    """`register` is a deprecated alias kept for code that still calls it; the built-ins do not."""
    callers = [
        str(path.relative_to(ROOT))
        for path in sorted((ROOT / "handlers").rglob("*.py"))
        if "repos" not in path.parts and "farm.handler.registry import" in path.read_text()
    ]
    assert callers == []


def test_importing_the_contract_brings_no_store_and_no_redis_client() -> None:
    probe = (
        "import sys, farm.handler.protocol, farm.handler.registry\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('redis', 'celery', 'kombu')"
        " or m.startswith(('farm.jobs.store', 'farm.jobs.ops', 'farm.redis'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, cwd=ROOT)
    assert out.stdout.strip() == "[]"
