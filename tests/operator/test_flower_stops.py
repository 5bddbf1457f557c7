"""Flower as the README starts it stops on the first SIGTERM or SIGINT whatever Redis does, and refuses
in one line to listen on another address without auth (issue 37). Flower's own handler lets the
interpreter exit, which joins its executor threads; with Redis hung they wait on the broker (the issue
measured SIGKILL needed after 25 s): the farm's handler bounds that wait (farm/flower_guard.py)."""

from __future__ import annotations

import signal
import subprocess
import time
from pathlib import Path

import pytest

from farm.embedded_redis import EmbeddedRedis, free_port
from farm.flower_guard import ALLOW_OPEN_ENV, EXIT_GRACE_S
from tests.operator.flower import flower_argv, flower_env, running_flower

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.mark.parametrize(("redis_gone", "signum"), [("hung", signal.SIGTERM), ("killed", signal.SIGINT)])
def test_flower_stops_on_the_first_signal_with_redis_gone(
    tmp_path: Path, redis_gone: str, signum: signal.Signals
) -> None:
    redis = EmbeddedRedis().start()
    assert redis.process is not None
    log = tmp_path / "flower.log"
    try:
        with running_flower(redis.url, log=log) as flower:
            if redis_gone == "hung":  # a host that stopped answering: connections open, nothing replies
                redis.process.send_signal(signal.SIGSTOP)
            else:
                redis.process.kill()
                redis.process.wait(10)
            time.sleep(12)  # Flower's enable-events (every 5 s) and reconnects now wait on the broker
            sent = time.monotonic()
            flower.process.send_signal(signum)
            code = flower.process.wait(EXIT_GRACE_S + 12)
            took = time.monotonic() - sent
            assert took < EXIT_GRACE_S + 4, f"{took:.1f} s"
            assert code in (0, 130), code
            assert "Traceback" not in log.read_text(errors="replace")
    finally:
        if redis.process.poll() is None:
            redis.process.send_signal(signal.SIGCONT)
        redis.stop()


def test_flower_on_every_interface_without_auth_is_refused_in_one_line() -> None:
    argv = flower_argv(free_port(), "--address=0.0.0.0")
    env = flower_env("redis://127.0.0.1:1/0")  # never reached: the refusal comes first
    done = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, done
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "refusing to listen on 0.0.0.0 without auth" in lines[0], done.stderr
    assert "--basic-auth" in lines[0] and ALLOW_OPEN_ENV in lines[0]
