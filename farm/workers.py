"""Live worker registry: each Celery worker heartbeats its node and queues into Redis.

Used for routing (is there a run worker on this node?) and for GET /status. Two keys hold it
(farm/keys.py): a sorted set of hostnames scored by when their registration expires, and a hash of
their descriptions. Reading it costs O(workers), never a walk of the keyspace; a heartbeat is one
`ZADD XX CH`; a worker that died without unregistering drops out when its score passes and is pruned
by the next heartbeat of any worker.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

import redis
import redis.asyncio as aioredis
from celery.signals import worker_init, worker_ready, worker_shutdown, worker_shutting_down

from containers.local import default_root
from farm import keys
from farm.outage import redis_outage, report
from farm.redis_clients import redis_client
from farm.redis_ops import AsyncRunner, Command, Op, Runner
from farm.settings import get_settings

log = logging.getLogger(__name__)

HEARTBEAT_S = 5.0
TTL_S = 15.0
PRUNE_EVERY = 6
"""Heartbeats between two prunes of expired registrations (a dead worker's entry costs nothing
meanwhile: readers skip expired scores)."""
_CACHE_S = 2.0

_cache: tuple[float, set[str]] = (0.0, set())
_stop = threading.Event()
_shared: redis.Redis | None = None


def _client() -> redis.Redis:
    """One client per process for the registry (the heartbeat thread and the run-hop routing)."""
    global _shared
    if _shared is None:
        _shared = redis_client(decode_responses=True)
    return _shared


def _info(description: dict[str, Any]) -> str:
    return json.dumps({**description, "registered_at": time.time()})


def register(client: redis.Redis, hostname: str, description: dict[str, Any]) -> None:
    pipe = client.pipeline(transaction=True)
    pipe.hset(keys.WORKERS_INFO, hostname, _info(description))
    pipe.zadd(keys.WORKERS, {hostname: time.time() + TTL_S})
    pipe.execute()


def heartbeat(client: redis.Redis, hostname: str) -> bool:
    """Extends the registration; False when it was gone (pruned while this worker was stalled)."""
    return bool(client.zadd(keys.WORKERS, {hostname: time.time() + TTL_S}, xx=True, ch=True))


def unregister(client: redis.Redis, hostname: str) -> None:
    pipe = client.pipeline(transaction=True)
    pipe.zrem(keys.WORKERS, hostname)
    pipe.hdel(keys.WORKERS_INFO, hostname)
    pipe.execute()


def prune(client: redis.Redis) -> int:
    """Drops registrations that expired; returns how many."""
    expired = client.zrangebyscore(keys.WORKERS, "-inf", time.time())
    if not expired:
        return 0
    pipe = client.pipeline(transaction=True)
    # ZREM only the entries still expired: a worker that re-registered meanwhile stays.
    pipe.zremrangebyscore(keys.WORKERS, "-inf", time.time())
    pipe.hdel(keys.WORKERS_INFO, *expired)
    pipe.execute()
    return len(expired)


def _descriptions(entries: list[tuple[Any, float]], raw: list[Any]) -> list[dict[str, Any]]:
    """Each live worker's description with `seen_at`, its last heartbeat (expiry minus the TTL)."""
    return [
        {**json.loads(value), "seen_at": expires - TTL_S}
        for (_, expires), value in zip(entries, raw, strict=True)
        if value
    ]


def _live() -> Op[list[dict[str, Any]]]:
    """The live workers' descriptions (farm/redis_ops.py: written once for the sync and async readers)."""
    entries: list[tuple[Any, float]] = yield Command(
        lambda r: r.zrangebyscore(keys.WORKERS, time.time(), "+inf", withscores=True)
    )
    names = [name for name, _ in entries]
    raw = (yield Command(lambda r: r.hmget(keys.WORKERS_INFO, names))) if names else []
    return _descriptions(entries, raw)


def live_workers(client: redis.Redis | None = None) -> list[dict[str, Any]]:
    return Runner(client or _client())(_live())


async def live_workers_async(client: aioredis.Redis) -> list[dict[str, Any]]:
    """live_workers for redis.asyncio clients (the API)."""
    return await AsyncRunner(client)(_live())


def live_run_queues() -> set[str]:
    """Queues named `run.*` that some live worker consumes (cached briefly; read on every run hop)."""
    global _cache
    now = time.monotonic()
    if now - _cache[0] > _CACHE_S:
        queues = {q for w in live_workers() for q in w.get("queues", []) if q.startswith("run.")}
        _cache = (now, queues)
    return _cache[1]


def local_sandboxes() -> int:
    """Sandboxes of this farm on this node (directories under the local runtime's root)."""
    try:
        return sum(
            1 for entry in os.scandir(default_root()) if not entry.name.startswith(".") and entry.is_dir()
        )
    except OSError:
        return 0


_reports: dict[str, Any] = {}


def report_state(key: str, value: Any) -> None:
    """Adds `key` (JSON data) to this worker's registered description from its next heartbeat on: what
    GET /metrics and the viewer read per worker (the warm pool's counts, tasks/warm.py)."""
    _reports[key] = value


def _beat(hostname: str, description: dict[str, Any]) -> None:
    r = _client()
    beats = 0
    while not _stop.wait(HEARTBEAT_S):
        try:
            if not heartbeat(r, hostname):
                register(r, hostname, description)
            redis_outage.back()
            now = {**_reports, "sandboxes": local_sandboxes()}
            if any(description.get(k) != v for k, v in now.items()):  # written only when it changed
                description.update(now)
                r.hset(keys.WORKERS_INFO, hostname, _info(description))
            beats += 1
            if beats % PRUNE_EVERY == 0:
                prune(r)
        except redis.RedisError as exc:
            report("heartbeat", exc, log, "worker heartbeat failed")
    if not redis_outage.down:  # (with Redis gone the registration expires by itself)
        with contextlib.suppress(redis.RedisError):
            unregister(r, hostname)


@worker_init.connect
def _warm_up(**kwargs: Any) -> None:
    """Import handlers and load the tokenizer before taking work, so no job pays for it (seconds)."""
    from farm.chat.tokenizer import ChatTokenizer
    from farm.handler.registry import names

    names()
    ChatTokenizer.load(get_settings().tokenizer)


@worker_ready.connect
def _start_heartbeat(sender: Any = None, **kwargs: Any) -> None:
    consumer = sender
    description = {
        "hostname": consumer.hostname,
        "node": get_settings().node,
        "queues": sorted(consumer.app.amqp.queues.consume_from),
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "concurrency": getattr(consumer.pool, "limit", None),
    }
    register(_client(), consumer.hostname, description)
    beat = threading.Thread(target=_beat, args=(consumer.hostname, description), daemon=True)
    beat.start()
    # Connected now, after every module's own receivers: it runs last.
    worker_shutdown.connect(_exit_without_finalizing(beat), weak=False)


@worker_shutdown.connect
def _stop_heartbeat(**kwargs: Any) -> None:
    _stop.set()


def _exit_without_finalizing(beat: threading.Thread) -> Callable[..., None]:
    """The worker's last shutdown step: it has stopped consuming and its pool is joined, so it exits
    here. The interpreter's own finalization of a worker's heap (transformers, tokenizers, handlers)
    took seconds on a loaded host, past the stop deadline."""

    def exit_now(sender: Any = None, **kwargs: Any) -> None:
        beat.join(timeout=1.0)  # its unregistration
        logging.shutdown()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        code = getattr(sender, "exitcode", 0)
        os._exit(code if isinstance(code, int) else 0)

    return exit_now


STOP_DEADLINE_S = 3.5
"""A worker exits this long after its first stop signal at the latest, whatever Redis does: a warm
shutdown waits for running stages, which draining hands back within a second or two, but with Redis
gone Celery's reconnect loop and every Redis call in the shutdown path retry for tens of seconds. A
stage still running then comes back through its lease (farm/jobs: the reaper re-sends it)."""


def _exit_after_deadline() -> None:
    log.warning("still stopping %.0f s after the stop signal; exiting now", STOP_DEADLINE_S)
    logging.shutdown()
    os._exit(0)


@worker_shutting_down.connect
def _start_stop_deadline(**kwargs: Any) -> None:
    timer = threading.Timer(STOP_DEADLINE_S, _exit_after_deadline)
    timer.daemon = True
    timer.start()
    # Daemon threads stop running once the interpreter finalizes (atexit work can be what hangs): the
    # kernel's SIGALRM, at its default action, ends the process then.
    signal.signal(signal.SIGALRM, signal.SIG_DFL)
    signal.alarm(int(STOP_DEADLINE_S) + 1)
