"""Flower as the README starts it stops on the first SIGTERM or SIGINT whatever Redis does, and refuses
in one line to listen on another address without auth (issue 37). Flower's own handler lets the
interpreter exit, which joins its executor threads; with Redis hung they wait on the broker (the issue
measured SIGKILL needed after 25 s): the farm's handler bounds that wait (farm/flower_guard.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from farm.embedded_redis import EmbeddedRedis, free_port
from farm.flower_guard import ALLOW_OPEN_ENV, EXIT_GRACE_S
from tests.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def flower_env(redis_url: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLOWER_") and k != ALLOW_OPEN_ENV}
    return {**env, "FARM_REDIS_URL": redis_url}


def start_flower(redis_url: str, port: int, log: Path) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "celery", "-A", "farm", "flower", f"--port={port}"]
    with log.open("wb") as out:
        flower = subprocess.Popen(argv, env=flower_env(redis_url), stdout=out, stderr=subprocess.STDOUT)
    wait_until(
        lambda: httpx.get(f"http://127.0.0.1:{port}/healthcheck", timeout=5).status_code,
        90,
        accept=lambda status: status == 200,
        ignore=(httpx.HTTPError,),
        what="Flower to answer",
    )
    return flower


@pytest.mark.parametrize(("redis_gone", "signum"), [("hung", signal.SIGTERM), ("killed", signal.SIGINT)])
def test_flower_stops_on_the_first_signal_with_redis_gone(
    tmp_path: Path, redis_gone: str, signum: signal.Signals
) -> None:
    redis = EmbeddedRedis().start()
    assert redis.process is not None
    port, log = free_port(), tmp_path / "flower.log"
    flower = start_flower(redis.url, port, log)
    try:
        if redis_gone == "hung":  # a host that stopped answering: connections open, nothing replies
            redis.process.send_signal(signal.SIGSTOP)
        else:
            redis.process.kill()
            redis.process.wait(10)
        time.sleep(12)  # Flower's enable-events (every 5 s) and reconnects now wait on the broker
        sent = time.monotonic()
        flower.send_signal(signum)
        code = flower.wait(EXIT_GRACE_S + 12)
        took = time.monotonic() - sent
        assert took < EXIT_GRACE_S + 4, f"{took:.1f} s"
        assert code in (0, 130), code
        assert "Traceback" not in log.read_text(errors="replace")
    finally:
        if flower.poll() is None:
            flower.kill()
            flower.wait(10)
        if redis.process.poll() is None:
            redis.process.send_signal(signal.SIGCONT)
        redis.stop()


def test_flower_on_every_interface_without_auth_is_refused_in_one_line() -> None:
    argv = [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "farm",
        "flower",
        f"--port={free_port()}",
        "--address=0.0.0.0",
    ]
    env = flower_env("redis://127.0.0.1:1/0")  # never reached: the refusal comes first
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "refusing to listen on 0.0.0.0 without auth" in lines[0], done.stderr
    assert "--basic-auth" in lines[0] and ALLOW_OPEN_ENV in lines[0]
