"""Issue 18's "every key named once, every Lua script given its keys through KEYS[]", checked on the
source: no `farm:` key name is spelled outside farm/keys.py, no Lua script anywhere in the farm builds
a key (each command's key argument is one of KEYS[] or a local function's `*_key` parameter fed from
KEYS[]), and the job scripts use only the job-hash fields farm/keys.py's JobField names."""

from __future__ import annotations

import ast
import re
from pathlib import Path

from farm.jobs import scripts
from farm.keys import JobField
from farm.models.results import STAGES, JobState

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("farm", "tasks", "handlers", "containers")
KEY_LITERAL = re.compile(r"""^farm:[a-z_]+""")
CALL = re.compile(r"""redis\.call\(\s*'([A-Za-z]+)'\s*,\s*([^,)]+)""")
NOT_A_KEY = {"PUBLISH"}
"""Commands whose first argument is no key (a channel)."""
KEY_ARGUMENT = re.compile(r"KEYS\[(\d+|[a-z])\]|[a-z_]*key")
"""A key from KEYS[] (by number, or by a loop index over it), or a variable holding one."""
VERDICTS = {"missing", "terminal", "done", "leased", "revoked", "expired", "go"}
STATS = {"stage_seconds_sum:", "stage_count:", "jobs_total:", "retries_total:infra"}
"""Counters of a bucket's stats hash (farm/keys.py)."""


def strings(path: Path) -> list[str]:
    tree = ast.parse(path.read_text())
    return [n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)]


def sources() -> list[tuple[str, list[str]]]:
    return [
        (path.relative_to(ROOT).as_posix(), strings(path))
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
    ]


def test_no_key_name_is_spelled_outside_farm_keys() -> None:
    found = [
        (rel, text)
        for rel, texts in sources()
        if rel != "farm/keys.py"
        for text in texts
        if KEY_LITERAL.match(text) or "'farm:" in text or '"farm:' in text
    ]
    assert found == []


def test_no_lua_script_builds_a_key() -> None:
    lua = [(rel, text) for rel, texts in sources() for text in texts if "redis.call(" in text]
    assert len(lua) >= 10  # the job scripts, the pool's, the callbacks', the gateway's, ...
    built = [
        (rel, command, argument.strip())
        for rel, text in lua
        for command, argument in CALL.findall(text)
        if command.upper() not in NOT_A_KEY and not KEY_ARGUMENT.fullmatch(argument.strip())
    ]
    assert built == []


def test_job_scripts_use_only_the_named_fields() -> None:
    per_stage = {f(stage) for stage in STAGES for f in (JobField.stage_done, JobField.stage_time)}
    allowed = (
        JobField.names()
        | per_stage
        | {s.value for s in JobState}
        | VERDICTS
        | STATS
        | {"", "0", "1", scripts.TRANSITION}
    )
    used = set()
    for name in dir(scripts):
        text = getattr(scripts, name)
        if isinstance(text, str) and "redis.call(" in text:
            code = re.sub(r"--.*", "", text)  # comments
            used |= {q for q in re.findall(r"'([^'\n]*)'", code) if not q.isupper()}  # not commands
    assert used, "no job script found"
    assert used - allowed == set()


def test_only_the_job_store_knows_the_job_hash_fields() -> None:
    """farm/jobs/ is the one codec of a job's hash: everyone else reads and writes a job through its typed
    objects (JobRecord, StageHandoff, the purpose-named reads of farm/jobs/ops.py), never by field name."""
    outside = [
        rel
        for package in PACKAGES
        for path in sorted((ROOT / package).rglob("*.py"))
        if not (rel := path.relative_to(ROOT).as_posix()).startswith("farm/jobs/")
        if rel != "farm/keys.py" and re.search(r"\bJobField\b", path.read_text())
    ]
    assert outside == []
