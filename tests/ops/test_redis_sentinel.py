"""The Sentinel option of ops/redis, run for real: a primary and a replica from the shipped configs,
three sentinels from the shipped sentinel.conf, then the client side the farm would use (redis-py's
Sentinel, sync and asyncio, and kombu's `sentinel://` broker URL) before and after a failover."""

from __future__ import annotations

import asyncio
import re
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import pytest
import redis
import redis.asyncio.sentinel as async_sentinel
from kombu import Connection
from redis.sentinel import Sentinel

from farm.embedded_redis import free_port, redis_server_binary
from tests.ops.conftest import OPS

MASTER = "farm-redis"
T = TypeVar("T")


def eventually(probe: Callable[[], T], timeout_s: float = 20.0) -> T:
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            value = probe()
            if value:
                return value
        except (redis.RedisError, OSError):
            if time.monotonic() > deadline:
                raise
        if time.monotonic() > deadline:
            raise TimeoutError(f"{probe} stayed false")
        time.sleep(0.2)


@dataclass
class SentinelSet:
    primary_port: int
    replica_port: int
    sentinel_ports: list[int]
    processes: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @property
    def sentinels(self) -> list[tuple[str, int]]:
        return [("127.0.0.1", port) for port in self.sentinel_ports]

    @property
    def broker_url(self) -> str:
        return ";".join(f"sentinel://127.0.0.1:{port}/0" for port in self.sentinel_ports)


def start_redis(tmp: Path, conf: Path, *overrides: str) -> subprocess.Popen[bytes]:
    """redis-server from its own copy of `conf`: on failover Redis rewrites the file it started from."""
    tmp.mkdir(parents=True, exist_ok=True)
    copy = tmp / conf.name
    if copy != conf:
        shutil.copyfile(conf, copy)
    return subprocess.Popen(
        [redis_server_binary(), str(copy), *overrides, "--dir", str(tmp), "--daemonize", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def sentinel_conf(tmp: Path, port: int, primary_port: int) -> Path:
    """The shipped sentinel.conf with this test's addresses (Sentinel rewrites its file: one each)."""
    text = (OPS / "redis" / "sentinel.conf").read_text()
    text = re.sub(r"(?m)^port .*$", f"port {port}", text)
    text = re.sub(r"(?m)^bind .*$", "bind 127.0.0.1", text)
    text = re.sub(r"(?m)^dir .*$", f"dir {tmp}", text)
    text, n = re.subn(
        rf"(?m)^sentinel monitor {MASTER} \S+ \d+ (\d+)$",
        rf"sentinel monitor {MASTER} 127.0.0.1 {primary_port} \1",
        text,
    )
    assert n == 1, "sentinel.conf must monitor farm-redis"
    tmp.mkdir(parents=True, exist_ok=True)
    path = tmp / "sentinel.conf"
    path.write_text(text)
    return path


@pytest.fixture
def sentinel_set(tmp_path: Path) -> Iterator[SentinelSet]:
    ports = SentinelSet(free_port(), free_port(), [free_port() for _ in range(3)])
    bind = ["--bind", "127.0.0.1"]
    try:
        primary_args = ["--port", str(ports.primary_port), *bind]
        replica_args = ["--port", str(ports.replica_port), *bind, "--replicaof", "127.0.0.1"]
        replica_args.append(str(ports.primary_port))
        conf = OPS / "redis"
        ports.processes.append(start_redis(tmp_path / "primary", conf / "redis-primary.conf", *primary_args))
        ports.processes.append(start_redis(tmp_path / "replica", conf / "redis-replica.conf", *replica_args))
        for i, port in enumerate(ports.sentinel_ports):
            path = sentinel_conf(tmp_path / f"sentinel{i}", port, ports.primary_port)
            ports.processes.append(start_redis(path.parent, path, "--sentinel"))
        primary = redis.Redis(port=ports.primary_port)
        # "Good" replicas are what min-replicas-to-write counts: online and acknowledging.
        eventually(lambda: primary.info("replication").get("min_slaves_good_slaves", 0) >= 1)
        for port in ports.sentinel_ports:
            watcher = redis.Redis(port=port, decode_responses=True)
            eventually(lambda w=watcher: len(w.sentinel_slaves(MASTER)) == 1)
        yield ports
    finally:
        for process in ports.processes:
            process.terminate()
        for process in ports.processes:
            try:
                process.wait(5)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(5)


def kombu_round_trip(url: str, payload: dict) -> dict:
    with Connection(url, transport_options={"master_name": MASTER}) as conn:
        queue = conn.SimpleQueue("farm-sentinel-check")
        queue.put(payload)
        message = queue.get(timeout=5)
        message.ack()
        queue.close()
        return message.payload


SHIPPED = {name: (OPS / "redis" / name).read_text() for name in ("redis-primary.conf", "redis-replica.conf")}


def test_clients_follow_the_master_through_a_failover(sentinel_set: SentinelSet) -> None:
    sentinel = Sentinel(sentinel_set.sentinels, socket_timeout=2)
    assert sentinel.discover_master(MASTER) == ("127.0.0.1", sentinel_set.primary_port)
    client = sentinel.master_for(MASTER, socket_timeout=2, decode_responses=True)
    # Writes need one replica in sync (min-replicas-to-write 1): it is, so they go through.
    client.set("farm:probe", "before")
    assert kombu_round_trip(sentinel_set.broker_url, {"stage": "init"}) == {"stage": "init"}

    redis.Redis(port=sentinel_set.sentinel_ports[0]).execute_command("SENTINEL", "FAILOVER", MASTER)
    eventually(lambda: sentinel.discover_master(MASTER) == ("127.0.0.1", sentinel_set.replica_port))

    # The same client object reconnects to the promoted replica; the replicated key survived.
    assert eventually(lambda: client.get("farm:probe")) == "before"
    # The old primary rejoins as a replica, so writes on the new primary are accepted again.
    eventually(lambda: client.set("farm:probe", "after"))
    assert kombu_round_trip(sentinel_set.broker_url, {"stage": "run"}) == {"stage": "run"}

    async def async_read() -> str | None:
        manager = async_sentinel.Sentinel(sentinel_set.sentinels, socket_timeout=2)
        async_client = manager.master_for(MASTER, decode_responses=True)
        try:
            return await async_client.get("farm:probe")
        finally:
            await async_client.aclose()

    assert asyncio.run(async_read()) == "after"
    # The shipped files stay as shipped: only the copies were rewritten.
    assert {name: (OPS / "redis" / name).read_text() for name in SHIPPED} == SHIPPED
