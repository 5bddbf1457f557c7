"""/healthz tells the truth quickly: 200 while Redis answers, 503 within a second once it does not."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import httpx
import pytest

from farm.api.backend_health import PROBE_EVERY_S
from farm.embedded_redis import EmbeddedRedis, free_port
from tests.waiting import wait_until

pytestmark = pytest.mark.integration


def test_healthz_turns_503_within_a_second_when_redis_dies() -> None:
    redis = EmbeddedRedis().start()
    port = free_port()
    env = {**os.environ, "FARM_REDIS_URL": redis.url, "FARM_API_TOKEN": ""}
    argv = [sys.executable, "-m", "uvicorn", "farm.api.app:create_app", "--factory", "--port", str(port)]
    api = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        url = f"http://127.0.0.1:{port}/healthz"
        up = wait_until(
            lambda: httpx.get(url, timeout=2),
            120,  # the API's start-up (imports), not the behaviour under test: seconds idle, ~40 s at load 20
            accept=lambda answer: answer.status_code == 200,
            interval_s=0.05,
            ignore=(httpx.HTTPError,),
            what="the API's /healthz to answer 200",
        )
        assert up.json() == {"ok": True}
        redis.stop()
        stopped = time.monotonic()
        took = []
        for _ in range(3):  # every probe, not only the first, answers within the second
            started = time.monotonic()
            answer = httpx.get(url, timeout=5)
            took.append(time.monotonic() - started)
            assert answer.status_code == 503 and answer.json()["ok"] is False
        # 0.8 s idle (the probe's timeout); the margin is for a loaded host: 1.2-1.4 s at load 18 on 2 cores.
        assert sorted(took)[1] < 1.5 and max(took) < 3.0, took
        # Not a wait for a condition: the API must live on against the dead Redis until every background
        # loop (result waiter, backend prober, every PROBE_EVERY_S) has met it, then stop cleanly. The
        # probes above took part of that time already.
        time.sleep(max(0.0, PROBE_EVERY_S + 0.5 - (time.monotonic() - stopped)))
        api.terminate()
        log = api.communicate(timeout=10)[1].decode(errors="replace")
        assert "Traceback" not in log, log[-3000:]
    finally:
        api.terminate()
        api.wait(10)
        redis.stop()
