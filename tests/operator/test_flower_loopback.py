"""Flower started as the README says (`celery -A farm flower`) listens on loopback only: Flower's own
default is every interface, and its UI then answers anyone without auth (issue 37). `--address` still
says otherwise (compose binds every interface of its container and requires FLOWER_BASIC_AUTH)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from farm.embedded_redis import EmbeddedRedis, free_port
from tests.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def listening_addresses(port: int) -> set[str]:
    """The local addresses (hex, as /proc/net/tcp{,6} write them) with a socket listening on `port`."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, hex_port = local.rsplit(":", 1)
            if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                found.add(address)
    return found


def test_flower_as_documented_listens_on_loopback_only(tmp_path: Path) -> None:
    redis = EmbeddedRedis().start()
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLOWER_")}
    env["FARM_REDIS_URL"] = redis.url
    argv = [sys.executable, "-m", "celery", "-A", "farm", "flower", f"--port={port}"]
    flower = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_until(
            lambda: httpx.get(f"http://127.0.0.1:{port}/healthcheck", timeout=5).status_code,
            90,
            accept=lambda status: status == 200,
            ignore=(httpx.HTTPError,),
            what="Flower to answer on loopback",
        )
        assert listening_addresses(port) == {"0100007F"}, listening_addresses(port)  # 127.0.0.1 only
    finally:
        flower.terminate()
        flower.wait(30)
        redis.stop()
