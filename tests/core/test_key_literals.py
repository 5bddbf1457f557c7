"""A ratchet on issue 18's "every key named once, every Lua script given its keys through KEYS[]": the key
names still spelled outside farm/keys.py are listed here, and a new one fails this test. Shrink the
lists as keys move into farm/keys.py and scripts receive them (a cluster needs every key in KEYS[])."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

LUA_BUILT_KEYS = {
    # farm/jobs/scripts.py: keys a script derives from a hash field or a set member, not from KEYS[]
    ("farm/jobs/scripts.py", "'farm:ready:' .."): 3,  # drop_ready, BEGIN_STAGE (run), FINALIZE
    ("farm/jobs/scripts.py", "'farm:job:' .."): 2,  # REAP, TAKE_READY_SLOT
}
PYTHON_KEY_LITERALS = {
    ("farm/gateway/sessions.py", '"farm:gateway:session"'): 1,
    ("farm/demo.py", '"farm:demo:claim"'): 1,
}
LITERAL = re.compile(r"""(f?["'])farm:[a-z_]+(:[a-z_]+)*:?(["']\s*\.\.|["']|\{)""")


def found() -> dict[tuple[str, str], int]:
    counts: dict[tuple[str, str], int] = {}
    for package in ("farm", "tasks", "handlers", "containers"):
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel == "farm/keys.py":
                continue
            for match in LITERAL.finditer(path.read_text()):
                text = match.group(0)
                text = text[:-1] if text.endswith("{") else text
                counts[(rel, text)] = counts.get((rel, text), 0) + 1
    return counts


def test_no_new_key_names_outside_farm_keys() -> None:
    assert found() == {**LUA_BUILT_KEYS, **PYTHON_KEY_LITERALS}
