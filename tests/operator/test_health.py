"""/healthz tells the truth quickly: 200 while Redis answers, 503 within a second once it does not."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import httpx
import pytest

from farm.embedded_redis import EmbeddedRedis, free_port

pytestmark = pytest.mark.integration


def test_healthz_turns_503_within_a_second_when_redis_dies() -> None:
    redis = EmbeddedRedis().start()
    port = free_port()
    env = {**os.environ, "FARM_REDIS_URL": redis.url, "FARM_API_TOKEN": ""}
    argv = [sys.executable, "-m", "uvicorn", "farm.api.app:create_app", "--factory", "--port", str(port)]
    api = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    try:
        url = f"http://127.0.0.1:{port}/healthz"
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(url, timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        assert httpx.get(url, timeout=2).json() == {"ok": True}
        redis.stop()
        for _ in range(3):  # every probe, not only the first, answers within the second
            started = time.monotonic()
            answer = httpx.get(url, timeout=5)
            assert answer.status_code == 503 and answer.json()["ok"] is False
            assert time.monotonic() - started < 1.0
        time.sleep(3)  # background loops (result waiter, prober) meet the dead Redis meanwhile
        api.terminate()
        log = api.communicate(timeout=10)[1].decode(errors="replace")
        assert "Traceback" not in log, log[-3000:]
    finally:
        api.terminate()
        api.wait(10)
        redis.stop()
