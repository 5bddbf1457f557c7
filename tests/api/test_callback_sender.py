"""The callback sender's writes never outlive the job (real Redis, the real sender; the receiver is an
in-process httpx transport, so the test decides what happens while a delivery is on the wire)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import httpx
import pytest
import redis
import redis.asyncio as aioredis

from farm import keys
from farm.api.callback_sender import CallbackSender
from farm.embedded_redis import EmbeddedRedis
from farm.jobs.messages import QueuedMessage
from farm.jobs.spec import JobSpec
from farm.jobs.store import AsyncJobStore, JobStore, terminal_result
from farm.keys import JobField
from farm.models.results import JobState


@pytest.fixture
def db_url(redis_server: EmbeddedRedis) -> Iterator[str]:
    """A database of its own: the session's API farm runs a callback sender on database 0."""
    url = redis_server.url.rsplit("/", 1)[0] + "/7"
    client = redis.Redis.from_url(url)
    client.flushdb()
    client.close()
    yield url


def _ended_job_with_callback(url: str, job_id: str) -> JobStore:
    store = JobStore(redis.Redis.from_url(url, decode_responses=True), ttl_s=3600)
    spec = JobSpec(job_id=job_id, handler="noop", instance={}, timeout_s=60, callback_url="http://trainer/cb")
    assert store.create(spec, {"init": f"{job_id}.init"}, QueuedMessage("q:init", "init"))
    _, record, token = store.begin_stage(job_id, "init", "w1")
    assert record is not None
    assert store.finalize(terminal_result(record, JobState.done), token=token)
    return store


async def _send_once(url: str, receiver: httpx.MockTransport) -> int:
    client = aioredis.from_url(url)
    try:
        sender = CallbackSender(AsyncJobStore(client, 3600))
        async with httpx.AsyncClient(transport=receiver) as http:
            sent, _ = await sender.send_due(http)
        return sent
    finally:
        await client.aclose()


def test_a_delivered_callback_is_recorded_and_unscheduled(db_url: str) -> None:
    store = _ended_job_with_callback(db_url, "cb-ok")
    bodies: list[bytes] = []

    def receive(request: httpx.Request) -> httpx.Response:
        bodies.append(request.content)
        return httpx.Response(204)

    assert asyncio.run(_send_once(db_url, httpx.MockTransport(receive))) == 1
    assert b'"job_id":"cb-ok"' in bodies[0]
    fields = store._r.hgetall(keys.job("cb-ok"))
    assert fields[JobField.CALLBACK_STATE] == "delivered" and fields[JobField.CALLBACK_ATTEMPTS] == "1"
    assert store._r.zscore(store.keys("cb-ok").callbacks, "cb-ok") is None


def test_a_failed_delivery_is_retried_later(db_url: str) -> None:
    store = _ended_job_with_callback(db_url, "cb-retry")
    assert asyncio.run(_send_once(db_url, httpx.MockTransport(lambda _: httpx.Response(503)))) == 1
    fields = store._r.hgetall(keys.job("cb-retry"))
    assert fields[JobField.CALLBACK_STATE] == "retrying" and fields[JobField.CALLBACK_ERROR] == "HTTP 503"
    assert store._r.zscore(store.keys("cb-retry").callbacks, "cb-retry") is not None


def test_a_job_gone_during_delivery_is_not_brought_back(db_url: str) -> None:
    """Its TTL ran out (or an operator deleted it) while the POST was on the wire: the outcome must not
    recreate the hash as a TTL-less stub of callback fields, nor keep the delivery scheduled."""
    store = _ended_job_with_callback(db_url, "cb-gone")

    def receive(_: httpx.Request) -> httpx.Response:
        store._r.delete(keys.job("cb-gone"))
        return httpx.Response(500)

    assert asyncio.run(_send_once(db_url, httpx.MockTransport(receive))) == 1
    assert not store._r.exists(keys.job("cb-gone"))
    assert store._r.zscore(store.keys("cb-gone").callbacks, "cb-gone") is None
