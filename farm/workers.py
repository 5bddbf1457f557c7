"""Live worker registry: each Celery worker heartbeats its node and queues into Redis.

Used for routing (is there a run worker on this node?) and for GET /status.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import threading
import time
from typing import Any

import redis
from celery.signals import worker_init, worker_ready, worker_shutdown

from farm import keys
from farm.redis_clients import redis_client
from farm.settings import get_settings

HEARTBEAT_S = 3.0
TTL_S = 15
_CACHE_S = 2.0

_cache: tuple[float, set[str]] = (0.0, set())
_stop = threading.Event()


def _client() -> redis.Redis:
    return redis_client(decode_responses=True)


def live_workers(client: redis.Redis | None = None) -> list[dict[str, Any]]:
    r = client or _client()
    names = list(r.scan_iter(match=f"{keys.WORKER_PREFIX}*", count=500))
    if not names:
        return []
    return [json.loads(raw) for raw in r.mget(names) if raw]


def live_run_queues() -> set[str]:
    """Queues named `run.*` that some live worker consumes (cached briefly; read on every run hop)."""
    global _cache
    now = time.monotonic()
    if now - _cache[0] > _CACHE_S:
        queues = {q for w in live_workers() for q in w.get("queues", []) if q.startswith("run.")}
        _cache = (now, queues)
    return _cache[1]


def _beat(hostname: str, payload: dict[str, Any]) -> None:
    r = _client()
    while not _stop.is_set():
        with contextlib.suppress(redis.RedisError):
            r.set(keys.worker(hostname), json.dumps({**payload, "seen_at": time.time()}), ex=TTL_S)
        _stop.wait(HEARTBEAT_S)
    with contextlib.suppress(redis.RedisError):
        r.delete(keys.worker(hostname))


@worker_init.connect
def _warm_up(**kwargs: Any) -> None:
    """Import handlers and load the tokenizer before taking work, so no job pays for it (seconds)."""
    from farm.chat.tokenizer import ChatTokenizer
    from handlers.registry import names

    names()
    ChatTokenizer.load(get_settings().tokenizer)


@worker_ready.connect
def _start_heartbeat(sender: Any = None, **kwargs: Any) -> None:
    consumer = sender
    queues = sorted(consumer.app.amqp.queues.consume_from)
    payload = {
        "hostname": consumer.hostname,
        "node": get_settings().node,
        "queues": queues,
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "concurrency": getattr(consumer.pool, "limit", None),
    }
    _beat_once = _client()
    _beat_once.set(keys.worker(consumer.hostname), json.dumps({**payload, "seen_at": time.time()}), ex=TTL_S)
    threading.Thread(target=_beat, args=(consumer.hostname, payload), daemon=True).start()


@worker_shutdown.connect
def _stop_heartbeat(**kwargs: Any) -> None:
    _stop.set()


async def live_workers_async(client: Any) -> list[dict[str, Any]]:
    """live_workers for redis.asyncio clients (the API)."""
    names = [name async for name in client.scan_iter(match=f"{keys.WORKER_PREFIX}*", count=500)]
    if not names:
        return []
    return [json.loads(raw) for raw in await client.mget(names) if raw]
