"""Ctrl-C on `python -m bench.learn` and `farm up`, in each phase, stops everything they started (no
process left, whichever session it was put in), without a traceback, and leaves no scratch directory
(issue 37: the bench printed a KeyboardInterrupt traceback during its warm start and left its
`farm llm serve` child running on its port and a 74 MB temp directory). Real processes throughout."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest

from farm.embedded_redis import free_port
from tests.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

TINY_BENCH = ["--steps", "40", "--groups", "1", "--n", "2", "--questions", "1", "--sft-max-epochs", "3"]


class Descendants:
    """Every process started under `root`, remembered as seen (a child put in a session of its own,
    as the bench's tiny server is, is still a descendant while its parent lives)."""

    def __init__(self, root: subprocess.Popen[bytes]) -> None:
        self.root = psutil.Process(root.pid)
        self.seen: dict[int, psutil.Process] = {}
        self.commands: dict[int, str] = {}

    def look(self) -> list[str]:
        try:
            for proc in self.root.children(recursive=True):
                # read again each time: a child caught between fork and exec shows its parent's command
                self.seen.setdefault(proc.pid, proc)
                self.commands[proc.pid] = " ".join(proc.cmdline())
        except psutil.Error:  # the root gone, or a child gone while being read
            pass
        return [self.commands[pid] for pid, proc in self.seen.items() if self._alive(proc)]

    def left(self) -> list[str]:
        return [f"{pid} {self.commands[pid][:100]}" for pid, proc in self.seen.items() if self._alive(proc)]

    @staticmethod
    def _alive(proc: psutil.Process) -> bool:
        try:  # is_running compares the start time: a reused pid is not ours
            return bool(proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE)
        except psutil.Error:
            return False


def interrupted(
    argv: list[str], env: dict[str, str], log: Path, ready: Callable[[Descendants, str], bool], what: str
) -> tuple[int, str, Descendants]:
    with log.open("wb") as sink:
        proc = subprocess.Popen(argv, env=env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
    family = Descendants(proc)
    try:
        wait_until(lambda: ready(family, log.read_text(errors="replace")), 240, what=what)
        family.look()
        proc.send_signal(signal.SIGINT)
        code = proc.wait(90)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    wait_until(family.left, 15, accept=lambda left: left == [], what="no process left")
    return code, log.read_text(errors="replace"), family


def bench_env(tmp_path: Path) -> dict[str, str]:
    (tmp_path / "tmp").mkdir()
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FARM_")}
    return {**clean, "TMPDIR": str(tmp_path / "tmp"), "PYTHONUNBUFFERED": "1"}


@pytest.mark.parametrize("phase", ["tiny server starting", "mid-run"])
def test_bench_learn_interrupted_in_each_phase(tmp_path: Path, phase: str) -> None:
    pytest.importorskip(
        "torch", reason="the bench's tiny policy needs the model extra: pip install -e '.[model]'"
    )
    argv = [sys.executable, "-m", "bench.learn", *TINY_BENCH, "--runs-dir", str(tmp_path / "runs")]

    def ready(family: Descendants, text: str) -> bool:
        if phase == "tiny server starting":
            return any("llm serve --policy tiny" in cmd for cmd in family.look())
        family.look()  # the warm start done and a first step reported
        return "farm up," in text and len(text.split("farm up,", 1)[1].strip().splitlines()) >= 2

    code, text, family = interrupted(argv, bench_env(tmp_path), tmp_path / "bench.log", ready, phase)
    assert code == 130 and "Traceback" not in text, text
    assert text.strip().splitlines()[-1] == "interrupted; everything it started is stopped", text
    assert any("llm serve --policy tiny" in cmd for cmd in family.commands.values()), family.commands
    assert list((tmp_path / "tmp").glob("bench-learn-*")) == [], "the scratch directory is left"
    empty = [f.name for f in (tmp_path / "runs").glob("*") if f.stat().st_size == 0]
    assert empty == [], "an empty run file is left"


@pytest.mark.parametrize("phase", ["starting", "running"])
def test_farm_up_interrupted_in_each_phase(tmp_path: Path, phase: str) -> None:
    env = {**bench_env(tmp_path), "FARM_WORKDIR": str(tmp_path / "work")}
    argv = [sys.executable, "-m", "farm.cli", "up", "--port", str(free_port())]

    def ready(family: Descendants, text: str) -> bool:
        if phase == "starting":
            return len(family.look()) >= 2  # Redis and a first process of the farm, not all up yet
        family.look()
        return "Ctrl-C drains and stops everything." in text

    code, text, _ = interrupted(argv, env, tmp_path / "up.log", ready, f"farm up {phase}")
    assert code in (0, 130) and "Traceback" not in text, text
