"""The viewer's "N s ago" (farm/ui/static/common.js `farm.ago`): a time ahead of the browser's clock (a
worker's clock a little fast, as a screenshot's "-4 s ago" showed) reads "0 s ago", never negative.
Run in Node: the function itself, not a copy of it."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

import farm.ui

COMMON_JS = Path(farm.ui.__file__).parent / "static" / "common.js"
NODE = shutil.which("node") or shutil.which("nodejs")


def ago(offsets_s: list[float], now_s: float = 1_800_000_000.0) -> list[str]:
    """`farm.ago(now + offset)` for each offset, with the page's clock at `now_s`."""
    if NODE is None:
        pytest.skip("node is not installed (the viewer's JavaScript runs in Node for this test)")
    script = (
        f"Date.now = () => {now_s * 1000!r};\n"
        f"const source = require('fs').readFileSync({json.dumps(str(COMMON_JS))}, 'utf8');\n"
        "const farm = new Function(source + '; return farm;')();\n"
        f"console.log(JSON.stringify({json.dumps(offsets_s)}.map((o) => farm.ago({now_s!r} + o))));\n"
    )
    done = subprocess.run([NODE, "-e", script], capture_output=True, text=True, timeout=30, check=True)
    answer: list[str] = json.loads(done.stdout)
    return answer


def test_a_time_in_the_future_reads_zero_seconds_ago() -> None:
    assert ago([4.0, 0.4, 3600.0]) == ["0 s ago", "0 s ago", "0 s ago"]


def test_past_times_read_as_before() -> None:
    assert ago([-4.0, -0.4, -89.0, -600.0]) == ["4 s ago", "0 s ago", "89 s ago", "10 min ago"]
