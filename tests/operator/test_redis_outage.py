"""A lost Redis explains itself: every route answers 503 within a second (not after the clients'
retries), each process logs one line when it loses Redis and one when it is back, without a traceback,
every log line has its time, and workers stop within 5 s of SIGTERM whatever Redis does. Real
redis-server stopped and restarted on its port, real API and `celery worker` processes."""

from __future__ import annotations

import os
import re
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from farm.embedded_redis import EmbeddedRedis, free_port
from farm.launcher import LocalFarm, WorkerSpec
from tests.waiting import wait_answering, wait_until

pytestmark = pytest.mark.integration

ROUTES: list[tuple[str, str, dict[str, object] | None]] = [
    ("GET", "/status", None),
    ("GET", "/jobs/nope", None),
    ("POST", "/process", {"instance": {"handler": "noop"}, "wait": False}),
    ("POST", "/process", {"instance": {"handler": "noop"}, "wait": True}),
    ("POST", "/cancel", {"job_id": "nope"}),
    ("GET", "/rollout/task/nope", None),
    ("GET", "/rollout/status", None),
    ("GET", "/llm_servers", None),
    ("GET", "/metrics", None),
    ("GET", "/healthz", None),
]
LOST, BACK = "lost the farm's Redis", "the farm's Redis is back"
STAMPED = re.compile(r"^\[?\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d")


def _answers_within(api: str) -> list[tuple[str, int, float]]:
    seen = []
    with httpx.Client(base_url=api, timeout=30) as http:
        for method, path, body in ROUTES:
            started = time.monotonic()
            answer = http.request(method, path, json=body)
            seen.append((f"{method} {path}", answer.status_code, time.monotonic() - started))
    return seen


def _check_503s(seen: list[tuple[str, int, float]]) -> None:
    assert all(status == 503 for _, status, _ in seen), seen
    # The requirement is a second (0.2-0.6 s idle); the margin is for a loaded host (load 20 on 2 cores
    # here while seven others ran their tests). Before: 11 s for /status, 22 s for POST /process.
    assert statistics.median(s for _, _, s in seen) < 1.5, seen
    assert max(s for _, _, s in seen) < 3.0, seen


@pytest.fixture
def api_alone(tmp_path: Path) -> Iterator[tuple[str, EmbeddedRedis, Path]]:
    redis = EmbeddedRedis().start()
    port = free_port()
    log = tmp_path / "api.log"
    env = {**os.environ, "FARM_REDIS_URL": redis.url, "FARM_API_TOKEN": ""}
    argv = [sys.executable, "-m", "uvicorn", "farm.api.app:create_app", "--factory", "--port", str(port)]
    with log.open("wb") as out:
        api = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        wait_answering(f"{url}/healthz", 60, what="the API to answer")
        yield url, redis, log
    finally:
        api.terminate()
        api.wait(10)
        redis.stop()


def test_every_route_answers_503_within_a_second_and_the_log_says_so_once(
    api_alone: tuple[str, EmbeddedRedis, Path],
) -> None:
    url, redis, log = api_alone
    redis.stop()
    _check_503s(_answers_within(url))
    _check_503s(_answers_within(url))  # a known outage as well as a fresh one
    revived = EmbeddedRedis(port=redis.port).start()
    try:
        wait_until(
            lambda: httpx.get(f"{url}/status", timeout=5).status_code,
            30,
            accept=lambda status: status == 200,
            what="/status to answer 200 once Redis is back",
        )
        text = wait_until(log.read_text, 10, accept=lambda t: BACK in t, what="the 'back' line")
    finally:
        revived.stop()
    assert text.count(LOST) == 1 and text.count(BACK) == 1, text
    assert "Traceback" not in text, text
    lines = [line for line in text.splitlines() if line.strip()]
    assert lines and all(STAMPED.match(line) for line in lines), text


@pytest.mark.slow
def test_a_farm_through_an_outage_logs_once_per_process_and_its_workers_stop_in_5_s(tmp_path: Path) -> None:
    logs = tmp_path / "logs"
    farm = LocalFarm(
        workers=[WorkerSpec(q, concurrency=2) for q in ("init", "run", "eval")],
        llm_policy=None,
        log_dir=logs,
        env={"FARM_WORKDIR": str(tmp_path / "work")},
    )
    with farm:
        assert farm._redis is not None
        port = farm._redis.port
        farm._redis.stop()
        _check_503s(_answers_within(farm.api_url))
        time.sleep(6)  # not a wait for a condition: every loop (heartbeat every 5 s) meets the outage
        farm._redis = EmbeddedRedis(port=port).start()

        def counts() -> dict[str, tuple[int, int]]:
            texts = {p.name: p.read_text() for p in logs.glob("*.log")}
            return {name: (t.count(LOST), t.count(BACK)) for name, t in texts.items()}

        # Celery's reconnect backs off (2, 4, 6... s); the heartbeat notices the return within 5 s.
        wait_until(counts, 60, accept=lambda c: all(back >= 1 for _, back in c.values()), what="'back' lines")
        assert set(counts().values()) == {(1, 1)}, counts()
        for path in logs.glob("*.log"):
            text = path.read_text()
            assert "Traceback" not in text, f"{path.name}:\n{text[-3000:]}"
            ours = [line for line in text.splitlines() if "farm's Redis" in line]
            assert all(STAMPED.match(line) for line in ours), ours

        farm._redis.stop()  # SIGTERM with Redis gone: the case that took ~20 s
        workers = [proc for name, proc in farm.children() if name.startswith("worker-")]
        time.sleep(1)
        started = time.monotonic()
        for proc in workers:
            os.killpg(proc.pid, signal.SIGTERM)
        for proc in workers:
            proc.wait(timeout=30)
        took = time.monotonic() - started
        assert took < 5.5, f"workers took {took:.1f} s to stop"
