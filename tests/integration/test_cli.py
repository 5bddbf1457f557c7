"""The commands a newcomer runs first: `farm up` (Ctrl-C stops everything) and `farm demo`."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import psutil
import pytest

from farm.embedded_redis import EmbeddedRedis, free_port
from tests.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def descendants(pid: int) -> list[psutil.Process]:
    try:
        return psutil.Process(pid).children(recursive=True)
    except psutil.NoSuchProcess:
        return []


def all_gone(procs: list[psutil.Process], timeout_s: float = 15) -> list[psutil.Process]:
    _, alive = psutil.wait_procs(procs, timeout=timeout_s)
    return alive


@pytest.fixture
def own_redis() -> Iterator[EmbeddedRedis]:
    """Not the session's Redis: a second farm on it would share queues with the session farm."""
    server = EmbeddedRedis().start()
    yield server
    server.stop()


def test_farm_up_serves_and_ctrl_c_leaves_no_process(own_redis: EmbeddedRedis, tmp_path: Path) -> None:
    port = free_port()
    env = {**os.environ, "FARM_REDIS_URL": own_redis.url, "FARM_WORKDIR": str(tmp_path)}
    output = open(tmp_path / "up.log", "wb")  # noqa: SIM115 (a file, not a pipe nobody drains)
    proc = subprocess.Popen(
        [sys.executable, "-m", "farm.cli", "up", "--port", str(port), "--run-concurrency", "2"],
        env=env,
        stdout=output,
        stderr=subprocess.STDOUT,
        start_new_session=True,
        # As when started in the background by a script: SIGINT arrives ignored, and Ctrl-C must
        # still stop everything.
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    children: list[psutil.Process] = []
    try:

        def serving() -> bool:
            assert proc.poll() is None, (tmp_path / "up.log").read_text()
            return bool(httpx.get(f"http://127.0.0.1:{port}/llm_servers", timeout=1).json())

        wait_until(serving, 90, interval_s=0.1, ignore=(httpx.HTTPError, ValueError), what="farm up serving")
        children = descendants(proc.pid)
        assert len(children) >= 5  # api, three workers, reference LLM (+ pool processes)
        result = httpx.post(
            f"http://127.0.0.1:{port}/process", json={"instance": {"handler": "noop"}}, timeout=30
        ).json()
        assert result["state"] == "done"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(60) == 0, (tmp_path / "up.log").read_text()[-3000:]
        assert all_gone(children) == []
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        for child in children:  # each runs in its own session: the group kill above misses them
            with contextlib.suppress(psutil.Error):
                child.kill()
        output.close()


def test_farm_demo_runs_a_batch_and_writes_trajectories(own_redis: EmbeddedRedis, tmp_path: Path) -> None:
    out = tmp_path / "demo.jsonl"
    env = {**os.environ, "FARM_REDIS_URL": own_redis.url, "FARM_WORKDIR": str(tmp_path / "work")}
    proc = subprocess.Popen(
        [sys.executable, "-m", "farm.cli", "demo", "--tasks", "4", "--samples", "2", "--out", str(out)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    seen: list[psutil.Process] = []
    try:
        while proc.poll() is None:  # a sample of its processes every 0.5 s, until it exits
            seen.extend(descendants(proc.pid))
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(0.5)
        output = proc.stdout.read() if proc.stdout else ""
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 0, output
    assert "rollouts/s" in output and "mean reward" in output
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(lines) == 8
    assert {line["state"] for line in lines} == {"done"}, [line["error"] for line in lines if line["error"]]
    assert seen, "no process of the demo was ever seen: the check below would hold vacuously"
    assert all_gone(list({p.pid: p for p in seen}.values()), timeout_s=5) == []
