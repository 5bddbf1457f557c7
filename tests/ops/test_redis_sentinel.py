"""The Sentinel option of ops/redis, run for real: a primary and a replica from the shipped configs,
three sentinels from the shipped sentinel.conf, then the client side (redis-py's Sentinel, sync and
asyncio, and kombu's `sentinel://` broker URL) before and after a failover; then the farm's own
clients (farm/redis_clients.py) and a whole LocalFarm pointed at the sentinels through one."""

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

import httpx
import pytest
import redis
import redis.asyncio.sentinel as async_sentinel
from kombu import Connection
from redis.sentinel import Sentinel

from farm import keys
from farm.api.waiter import JobWaiter
from farm.embedded_redis import free_port, redis_server_binary
from farm.jobs.store import AsyncJobStore
from farm.launcher import LocalFarm, WorkerSpec
from farm.models.results import JobResult, JobState
from farm.redis_clients import async_redis_client, redis_client
from farm.settings import Settings
from tests.integration.jobs import submit, wait_state
from tests.ops.conftest import OPS
from tests.waiting import wait_until

pytestmark = pytest.mark.slow

MASTER = "farm-redis"
T = TypeVar("T")


def eventually(probe: Callable[[], T], timeout_s: float = 20.0) -> T:
    """The first truthy value of `probe`; Redis errors meanwhile (a failover under way) are "not yet"."""
    what = f"{getattr(probe, '__qualname__', probe)} to become true"
    return wait_until(probe, timeout_s, what=what, interval_s=0.05, ignore=(redis.RedisError, OSError))


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
        primary = redis.Redis(port=ports.primary_port)
        # "Good" replicas are what min-replicas-to-write counts: online and acknowledging.
        eventually(lambda: primary.info("replication").get("min_slaves_good_slaves", 0) >= 1)
        # Sentinels started only now find the replica in sync at once. Every sentinel must see it so,
        # or a failover finds no candidate (NOGOODSLAVE); they poll INFO only every 10 s.
        for i, port in enumerate(ports.sentinel_ports):
            path = sentinel_conf(tmp_path / f"sentinel{i}", port, ports.primary_port)
            ports.processes.append(start_redis(path.parent, path, "--sentinel"))
        for port in ports.sentinel_ports:
            watcher = redis.Redis(port=port, decode_responses=True)
            eventually(lambda w=watcher: replica_states(w) == [("slave", "ok")])
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


def replica_states(sentinel: redis.Redis) -> list[tuple[str, str]]:
    return [(r["flags"], r["master-link-status"]) for r in sentinel.sentinel_slaves(MASTER)]


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


def force_failover(sentinel_set: SentinelSet) -> float:
    """Promote the replica; returns when the sentinels name it, with the time the failover began."""
    began = time.monotonic()
    redis.Redis(port=sentinel_set.sentinel_ports[0]).execute_command("SENTINEL", "FAILOVER", MASTER)
    sentinel = Sentinel(sentinel_set.sentinels, socket_timeout=2)
    eventually(lambda: sentinel.discover_master(MASTER) == ("127.0.0.1", sentinel_set.replica_port))
    return began


def test_farm_clients_ride_out_a_failover(sentinel_set: SentinelSet) -> None:
    settings = Settings(redis_url=sentinel_set.broker_url, redis_sentinel_master=MASTER)
    new_master = redis.Redis(port=sentinel_set.replica_port)
    sync = redis_client(settings=settings, decode_responses=True)

    async def scenario() -> float:
        aclient = async_redis_client(settings=settings, decode_responses=True)
        waiter = JobWaiter(aclient, AsyncJobStore(aclient, 60))
        await waiter.start()
        try:
            await aclient.set("farm:probe:async", "before")
            sync.set("farm:probe:sync", "before")
            began = await asyncio.to_thread(force_failover, sentinel_set)
            # The same client objects and no retry loop here: their own retries ride out the window
            # in which the old master is demoted and the new one has no replica yet (NOREPLICAS).
            await asyncio.gather(
                aclient.set("farm:probe:async", "after"),
                asyncio.to_thread(sync.set, "farm:probe:sync", "after"),
            )
            window = time.monotonic() - began
            assert sync.connection_pool.get_master_address() == ("127.0.0.1", sentinel_set.replica_port)
            assert await aclient.get("farm:probe:sync") == "after"
            assert sync.get("farm:probe:async") == "after"

            # The result waiter's subscription: cut every pub/sub connection; it comes back on the new
            # master and wakes waiters again.
            for port in (sentinel_set.primary_port, sentinel_set.replica_port):
                redis.Redis(port=port).client_kill_filter(_type="pubsub")
            await asyncio.to_thread(
                eventually,
                lambda: dict(new_master.pubsub_numsub(keys.DONE_CHANNEL))[keys.DONE_CHANNEL.encode()],
            )
            woken = asyncio.Event()
            waiter._events["job-after-failover"].append(woken)
            sync.publish(keys.DONE_CHANNEL, "job-after-failover")
            await asyncio.wait_for(woken.wait(), 2)
            return window
        finally:
            await waiter.stop()
            await aclient.aclose()

    try:
        window = asyncio.run(scenario())
    finally:
        sync.close()
    print(f"farm clients: writes went through {window:.1f} s after the failover began")


def test_local_farm_runs_jobs_through_a_failover(sentinel_set: SentinelSet, tmp_path: Path) -> None:
    farm = LocalFarm(
        redis_url=sentinel_set.broker_url,
        workers=[WorkerSpec(queue, concurrency=2) for queue in ("init", "run", "eval")],
        llm_policy=None,
        log_dir=tmp_path / "logs",
        env={"FARM_REDIS_SENTINEL_MASTER": MASTER, "FARM_WORKDIR": str(tmp_path / "work")},
    )
    noop = {"handler": "noop"}
    with farm, httpx.Client(base_url=farm.api_url, timeout=90) as api:
        first = api.post("/process", json={"instance": noop, "wait": True})
        assert JobResult.model_validate(first.json()).state == JobState.done, first.text
        in_flight = [submit(api, {"handler": "noop", "run_s": 2.0}) for _ in range(4)]
        began = force_failover(sentinel_set)
        during = submit(api, noop)
        results = [
            wait_state(api, job_id, {"done", "error", "timeout"}, 60) for job_id in [*in_flight, during]
        ]
        assert [r.state for r in results] == [JobState.done] * len(results), [r.model_dump() for r in results]
        recovered = time.monotonic() - began
        after = api.post("/process", json={"instance": noop, "wait": True})
        assert JobResult.model_validate(after.json()).state == JobState.done, after.text
    print(f"LocalFarm: {len(results)} jobs across the failover all done {recovered:.1f} s after it began")
