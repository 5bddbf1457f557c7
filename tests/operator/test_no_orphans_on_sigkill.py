"""No launcher leaves a process behind, even SIGKILLed: a real LocalFarm (what `farm up`, `farm demo`
and the benches start: Redis, API, workers, the reference LLM) in a process killed with SIGKILL."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

LAUNCHER = r"""
import json, sys, time
from farm.launcher import LocalFarm, WorkerSpec
workers = [WorkerSpec("init", concurrency=1), WorkerSpec("run", concurrency=1)]
farm = LocalFarm(workers=workers, supervise=True)
farm.start()
print(json.dumps([pid for _, pid, _ in farm.table()]), flush=True)
time.sleep(600)
"""


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def test_a_sigkilled_launcher_takes_its_farm_with_it(tmp_path: Path) -> None:
    env = {**os.environ, "FARM_WORKDIR": str(tmp_path / "work")}
    env = {k: v for k, v in env.items() if k not in ("FARM_REDIS_URL", "FARM_API_PORT")}
    launcher = subprocess.Popen(
        [sys.executable, "-c", LAUNCHER], env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
    )
    try:
        assert launcher.stdout is not None
        line = launcher.stdout.readline()  # the farm is up (or the launcher died: an empty line)
        pids = json.loads(line)
        assert len(pids) >= 5 and all(_alive(pid) for pid in pids), pids  # redis, llm, api, 2 workers
    finally:
        launcher.send_signal(signal.SIGKILL)
        launcher.wait(10)
    wait_until(
        lambda: [pid for pid in pids if _alive(pid)],
        15,
        accept=lambda alive: not alive,
        what="every child of the SIGKILLed launcher to be gone",
    )
