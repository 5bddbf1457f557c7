"""The host's processes as /proc lists them, for tests of what a command or a sandbox leaves running."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path


def process_stats() -> Iterator[tuple[Path, str, list[str]]]:
    """Each process's /proc entry, its command name and the fields of its `stat` after the name (state,
    ppid, pgrp, session, ...); one that ends while read is passed over."""
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            stat = (proc / "stat").read_text()
        except OSError:
            continue
        yield proc, stat[stat.index("(") + 1 : stat.rindex(")")], stat[stat.rindex(")") + 2 :].split()
