"""A worker started by the README's own command (`celery -A farm worker -Q run`, no farm flags) is the
farm's worker: no gossip or mingle (before, only the launcher's `--without-gossip --without-mingle` gave
that, and the documented command threw `Error on restarting Gossip` tracebacks through every Redis
outage), one line when Redis is lost and one when it is back, and every line it writes stamped with its
time (its start banner included). Real redis-server stopped and restarted, real `celery worker`."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from farm.embedded_redis import EmbeddedRedis
from tests.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]
LOST, BACK = "lost the farm's Redis", "the farm's Redis is back"
STAMPED = re.compile(r"^\[?\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d")


def test_the_documented_worker_command_is_quiet_and_stamped_through_an_outage(tmp_path: Path) -> None:
    redis = EmbeddedRedis().start()
    log = tmp_path / "worker.log"
    env = {**os.environ, "FARM_REDIS_URL": redis.url, "FARM_WORKDIR": str(tmp_path / "work")}
    argv = [sys.executable, "-m", "celery", "-A", "farm", "worker", "-Q", "run", "-c", "1"]
    with log.open("wb") as out:
        worker = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_until(
            log.read_text, 60, accept=lambda t: "starting: queues" in t, what="the worker's start line"
        )
        time.sleep(2)  # connected and consuming
        redis.stop()
        time.sleep(8)  # not a wait for a condition: reconnect attempts and heartbeats meet the outage
        redis = EmbeddedRedis(port=redis.port).start()
        wait_until(log.read_text, 60, accept=lambda t: BACK in t, what="the 'back' line")
        time.sleep(2)
    finally:
        os.killpg(worker.pid, signal.SIGTERM)
        worker.wait(30)
        redis.stop()
    text = log.read_text()
    assert "Traceback" not in text and "Gossip" not in text and "mingle" not in text.lower(), text
    assert text.count(LOST) == 1 and text.count(BACK) == 1, text
    lines = [line for line in text.splitlines() if line.strip()]
    assert lines and all(STAMPED.match(line) for line in lines), text
