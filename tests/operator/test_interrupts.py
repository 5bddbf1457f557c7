"""Ctrl-C on a long command, in each phase, stops everything it started, without a traceback, and leaves
no empty run file (before: an interrupted `farm demo` left a 0-byte `farm-runs/demo-*.jsonl` that the
README's `farm report farm-runs/demo-*.jsonl` then choked on). Real `farm demo` processes."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.procfs import process_stats
from tests.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def session_processes(sid: int) -> list[str]:
    """The processes still in session `sid` (the command's own, started with a new session)."""
    return [
        f"{proc.name} {(proc / 'cmdline').read_bytes()[:120]!r}"
        for proc, _, fields in process_stats()
        if int(fields[3]) == sid and fields[0] != "Z"
    ]


@pytest.mark.parametrize("phase", ["starting", "running"])
def test_farm_demo_interrupted_in_each_phase(tmp_path: Path, phase: str) -> None:
    out, log = tmp_path / "runs" / "demo.jsonl", tmp_path / "demo.log"
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FARM_")}
    env = {**clean, "FARM_WORKDIR": str(tmp_path / "work"), "PYTHONUNBUFFERED": "1"}
    argv = [sys.executable, "-m", "farm.cli", "demo", "--tasks", "64", "--out", str(out)]
    with log.open("wb") as sink:
        demo = subprocess.Popen(argv, env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        if phase == "starting":
            time.sleep(1.5)
        else:
            wait_until(log.read_text, 120, accept=lambda t: "farm up at" in t, what="the demo's farm up")
        demo.send_signal(signal.SIGINT)
        code = demo.wait(60)
    finally:
        if demo.poll() is None:
            os.killpg(demo.pid, signal.SIGKILL)
    text = log.read_text()
    assert code == 130 and "Traceback" not in text, text
    wait_until(lambda: session_processes(demo.pid), 10, accept=lambda left: left == [], what="no child left")
    # a run file only with the rollouts that finished, never an empty one
    assert not out.exists() or out.read_text().strip(), text
