"""The backend pool against a real (private) Redis: least-assigned, sticky, atomic, swap-safe."""

from __future__ import annotations

import asyncio
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import redis
import redis.asyncio as aioredis

from farm.pool import AsyncBackendPool, BackendPool

A, B, C = "http://127.0.0.1:9001/v1", "http://127.0.0.1:9002/v1", "http://127.0.0.1:9003/v1"


def test_least_assigned_spreads_and_is_sticky(redis_url: str) -> None:
    pool = BackendPool(redis.Redis.from_url(redis_url))
    for a in (A, B, C):
        pool.add(a)
    first = [pool.acquire(f"job{i}").address for i in range(6)]
    assert Counter(first) == {A: 2, B: 2, C: 2}
    assert first[:3] == [A, B, C]
    # sticky: the same key always gets the same backend, without counting twice
    assert all(pool.acquire(f"job{i}").address == first[i] for i in range(6))
    assert {b.address: b.assigned for b in pool.list()} == {A: 2, B: 2, C: 2}


def test_release_frees_the_slot(redis_url: str) -> None:
    pool = BackendPool(redis.Redis.from_url(redis_url))
    pool.add(A)
    pool.add(B)
    assert pool.acquire("j1").address == A
    assert pool.acquire("j2").address == B
    pool.release("j1")
    assert pool.acquire("j3").address == A
    pool.release("j3")
    pool.release("j3")  # releasing twice never goes negative
    assert {b.address: b.assigned for b in pool.list()} == {A: 0, B: 1}


def test_weights_and_unhealthy(redis_url: str) -> None:
    pool = BackendPool(redis.Redis.from_url(redis_url))
    pool.add(A, weight=3)
    pool.add(B, weight=1)
    got = Counter(pool.acquire(f"j{i}").address for i in range(8))
    assert got == {A: 6, B: 2}
    pool.mark_unhealthy(A)
    assert pool.acquire("j0").address == B  # a pin on an unhealthy backend moves
    assert all(pool.acquire(f"n{i}").address == B for i in range(3))
    assert [b.healthy for b in pool.list()] == [False, True]
    pool.mark_unhealthy(B)
    assert pool.acquire("x") is None


def test_concurrent_acquire_is_atomic(redis_url: str) -> None:
    pool = BackendPool(redis.Redis.from_url(redis_url))
    for a in (A, B, C):
        pool.add(a)

    def grab(i: int) -> str:
        return BackendPool(redis.Redis.from_url(redis_url)).acquire(f"k{i}").address

    with ThreadPoolExecutor(16) as ex:
        got = Counter(ex.map(grab, range(300)))
    assert got == {A: 100, B: 100, C: 100}


def test_checkpoint_swap_repins_in_flight_jobs(redis_url: str) -> None:
    pool = BackendPool(redis.Redis.from_url(redis_url))
    pool.add(A)
    assert pool.acquire("job").address == A
    pool.clear()
    assert pool.acquire("job") is None  # nothing to run on while the pool is empty
    pool.add(A)  # the same address comes back after the swap: a new generation
    pool.add(B)
    assert pool.acquire("job").address == A
    assert {b.address: b.assigned for b in pool.list()} == {A: 1, B: 0}
    pool.release("job")
    assert {b.address: b.assigned for b in pool.list()} == {A: 0, B: 0}


def test_inflight_counts(redis_url: str) -> None:
    pool = BackendPool(redis.Redis.from_url(redis_url))
    pool.add(A)
    pool.call_started(A)
    pool.call_started(A)
    pool.call_finished(A)
    pool.call_started("http://not-registered/v1")
    assert [(b.address, b.in_flight) for b in pool.list()] == [(A, 1)]


def test_async_pool_matches_sync(redis_url: str) -> None:
    async def scenario() -> list[str]:
        client = aioredis.Redis.from_url(redis_url)
        pool = AsyncBackendPool(client)
        await pool.add(A)
        await pool.add(B)
        got = [(await pool.acquire(f"s{i}")).address for i in range(4)]
        await pool.release("s0")
        await pool.call_started(A)
        listed = await pool.list()
        await client.aclose()
        assert [(b.assigned, b.in_flight) for b in listed] == [(1, 1), (2, 0)]
        return got

    assert asyncio.run(scenario()) == [A, B, A, B]


def test_a_minimum_policy_version_skips_older_and_unversioned_backends(redis_url: str) -> None:
    pool = BackendPool(redis.Redis.from_url(redis_url))
    pool.add(A, policy_version=3)
    pool.add(B, policy_version=4)
    pool.add(C)  # no version registered: never good enough for a job that needs one
    assert {pool.acquire(f"old{i}").address for i in range(3)} == {A, B, C}  # no floor: any
    assert [pool.acquire(f"new{i}", 4).address for i in range(3)] == [B, B, B]
    assert pool.acquire("newest", 5) is None  # none yet: the caller waits as for an empty pool
    # a job pinned to A before A fell behind its floor moves (and A's count is given back)
    assert pool.acquire("moving").address == A
    assigned_before = {b.address: b.assigned for b in pool.list()}[A]
    assert pool.acquire("moving", 4).address == B
    assert {b.address: b.assigned for b in pool.list()}[A] == assigned_before - 1
    pool.set_policy_version(A, 5)  # a publish brings A to the front again
    assert pool.acquire("newest", 5).address == A
