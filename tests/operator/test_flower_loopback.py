"""Flower started as the README says (`celery -A farm flower`) listens on loopback only: Flower's own
default is every interface, and its UI then answers anyone without auth (issue 37). `--address` still
says otherwise (compose binds every interface of its container and requires FLOWER_BASIC_AUTH)."""

from __future__ import annotations

from pathlib import Path

import pytest

from farm.embedded_redis import EmbeddedRedis
from tests.operator.flower import running_flower

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


def test_flower_as_documented_listens_on_loopback_only() -> None:
    redis = EmbeddedRedis().start()
    try:
        with running_flower(redis.url) as flower:
            addresses = listening_addresses(flower.port)
            assert addresses == {"0100007F"}, addresses  # 127.0.0.1 only
    finally:
        redis.stop()
