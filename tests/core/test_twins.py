"""The sync and async twins (pool, job store, worker registry) run the same operations (farm/redis_ops.py):
the same scenario through each, on a clean real Redis, sends the same commands and leaves the same keys."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import redis.asyncio as aioredis

from farm import keys
from farm.embedded_redis import EmbeddedRedis
from farm.jobs.messages import QueuedMessage
from farm.jobs.spec import JobSpec
from farm.jobs.store import AsyncJobStore, JobRecord, JobStore, terminal_result
from farm.models.results import JobState
from farm.pool import AsyncBackendPool, BackendPool
from farm.workers import live_workers, live_workers_async, register

A, B = "http://127.0.0.1:9001/v1", "http://127.0.0.1:9002/v1"


def _spec(job_id: str) -> JobSpec:
    return JobSpec(job_id=job_id, handler="noop", instance={}, timeout_s=60.0)


def _init(job_id: str) -> QueuedMessage:
    return QueuedMessage("q:init", f"init {job_id}")


def _present(record: JobRecord | None) -> JobRecord:
    assert record is not None
    return record


def _sync_scenario(url: str, broker: redis.Redis | None) -> list[Any]:
    client = redis.Redis.from_url(url, decode_responses=True)
    pool, store = BackendPool(client), JobStore(client, 3600, broker=broker)
    seen: list[Any] = [pool.add(A), pool.add(B, weight=2)]
    seen += [pool.acquire(f"s{i}") for i in range(3)]
    pool.release("s0")
    pool.mark_unhealthy(A)
    pool.mark_healthy(A)
    pool.call_started(B)
    seen += [pool.list(), pool.get(B), pool.remove(A), pool.clear()]
    seen += [store.create(_spec(j), {"init": f"{j}.init"}, _init(j)) for j in ("j1", "j2", "j1")]
    seen += [store.get("j1"), store.active_ids(), store.counts_by_state()]
    ended = terminal_result(_present(store.get("j2")), JobState.cancelled)
    seen += [store.finalize(ended, only_from="queued")]
    store.revoke("j1")
    seen += [store.counts_by_state(), store.active_ids()]
    register(client, "w1", {"queues": ["run.n1"]})
    seen += [[w["queues"] for w in live_workers(client)]]
    return seen


async def _async_scenario(url: str, broker: aioredis.Redis | None) -> list[Any]:
    client = aioredis.Redis.from_url(url, decode_responses=True)
    pool, store = AsyncBackendPool(client), AsyncJobStore(client, 3600, broker=broker)
    seen: list[Any] = [await pool.add(A), await pool.add(B, weight=2)]
    seen += [await pool.acquire(f"s{i}") for i in range(3)]
    await pool.release("s0")
    await pool.mark_unhealthy(A)
    await pool.mark_healthy(A)
    await pool.call_started(B)
    seen += [await pool.list(), await pool.get(B), await pool.remove(A), await pool.clear()]
    seen += [await store.create(_spec(j), {"init": f"{j}.init"}, _init(j)) for j in ("j1", "j2", "j1")]
    seen += [await store.get("j1"), await store.active_ids(), await store.counts_by_state()]
    ended = terminal_result(_present(await store.get("j2")), JobState.cancelled)
    seen += [await store.finalize(ended, only_from="queued")]
    await store.revoke("j1")
    seen += [await store.counts_by_state(), await store.active_ids()]
    register(redis.Redis.from_url(url, decode_responses=True), "w1", {"queues": ["run.n1"]})
    seen += [[w["queues"] for w in await live_workers_async(client)]]
    await client.aclose()
    return seen


_HANDSHAKE = {"hello", "client", "select", "info", "config"}
"""Per connection or the test's own: the asyncio client opens connections differently."""


def _commands(client: redis.Redis) -> Counter[str]:
    stats = client.info("commandstats")
    calls = {name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()}
    return Counter({name: n for name, n in calls.items() if name.split("|")[0] not in _HANDSHAKE})


def _keyspace(client: redis.Redis) -> dict[str, str]:
    return {key: client.type(key) for key in client.scan_iter()}


def _comparable(seen: list[Any]) -> list[Any]:
    """What the scenario read, without the times it recorded."""
    return [repr(item.spec) if hasattr(item, "spec") else repr(item) for item in seen]


def _run_both(redis_url: str, separate_broker: bool) -> None:
    client = redis.Redis.from_url(redis_url, decode_responses=True)
    outcomes = []
    for twin in ("sync", "async"):
        client.flushall()
        client.script_flush()  # both twins load their scripts once
        client.config_resetstat()
        if twin == "sync":
            broker = redis.Redis.from_url(redis_url, db=1) if separate_broker else None
            seen = _sync_scenario(redis_url, broker)
        else:
            abroker = aioredis.Redis.from_url(redis_url, db=1) if separate_broker else None
            seen = asyncio.run(_async_scenario(redis_url, abroker))
        calls = _commands(client)
        outcomes.append((calls, _keyspace(client), _comparable(seen)))
    (sync_calls, sync_keys, sync_seen), (async_calls, async_keys, async_seen) = outcomes
    assert async_seen == sync_seen
    assert async_keys == sync_keys and keys.JOBS_INDEX in sync_keys
    assert async_calls == sync_calls and sync_calls["evalsha"] >= 10


@pytest.fixture
def private_url() -> Iterator[str]:
    """A server of its own: the counts are the whole server's, and the session's API farm talks to the
    shared one (its waiter, prober and callback sender made the twins' counts differ in a full run)."""
    with EmbeddedRedis() as server:
        yield server.url


def test_twins_send_the_same_commands(private_url: str) -> None:
    _run_both(private_url, separate_broker=False)


def test_twins_send_the_same_commands_with_the_broker_elsewhere(private_url: str) -> None:
    _run_both(private_url, separate_broker=True)
