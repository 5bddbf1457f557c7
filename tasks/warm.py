"""The init worker's warm sandbox pool (containers/warm_pool.py): which process owns it, how it is sized,
and how it ends.

A worker that consumes the `init` queue owns one pool when FARM_WARM_POOL > 0, installed for its stage
threads: a job's init claims a pooled sandbox for its spec (handlers/sandboxing.py) and starts one cold
only when none is ready. A sizing thread sets the pool's budget every KEEP_EVERY_S from the init queue's
depth and the node's free READY slots (`pool_budget`), stops sandboxes pooled longer than
FARM_WARM_POOL_IDLE_S and publishes the pool's counts with the worker's heartbeat (GET /metrics, the
viewer); FILLERS threads start sandboxes up to the budget. Both send the sandboxes claimed since their
last round their job's TTL (`WarmPool.settle`: a claim itself sends nothing). At shutdown the pool stops
its sandboxes; a worker killed outright leaves them to the orphan sweep of any worker on the node, which
stops every pooled sandbox whose owner is gone (tasks/orphans.py).
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import redis
from celery.signals import worker_ready, worker_shutting_down

from containers.local import LocalRuntime
from containers.warm_pool import WarmPool, install, installed
from farm.identity import FARM_LABEL
from farm.outage import report
from farm.settings import get_settings
from farm.workers import report_state
from tasks.services import job_store

log = logging.getLogger(__name__)

KEEP_EVERY_S = 0.5
FILLERS = 2
"""Sandboxes started at once for the pool: enough to refill it at a few per second, few enough that
the starts do not take the node's CPU from the rollouts."""
REPORT_KEY = "warm_pool"
_stop = threading.Event()


def pool_budget(limit: int, ready_buffer: int, ready_held: int, queued: int, concurrency: int) -> int:
    """Sandboxes the pool may hold: as many as could be claimed at once (the worker's concurrency) or as
    the init queue holds, whichever is more; never more than FARM_WARM_POOL, nor than the READY buffer's
    free slots (a pooled sandbox is a prepared sandbox waiting, which the buffer bounds). Several init
    workers on one node each read the same free slots, so together they may pool up to that many each:
    FARM_WARM_POOL is per worker."""
    if limit <= 0:
        return 0
    room = limit if ready_buffer <= 0 else min(limit, max(0, ready_buffer - ready_held))
    return min(room, max(queued, concurrency))


def _size(pool: WarmPool, concurrency: int) -> None:
    settings = get_settings()
    store = job_store()
    queued = store.queue_depths(["init"])["init"]
    held = store.ready_by_node({settings.node}).get(settings.node, 0)
    pool.set_budget(pool_budget(settings.warm_pool, settings.ready_buffer, held, queued, concurrency))
    pool.trim()


def _keep(pool: WarmPool, concurrency: int) -> None:
    while not _stop.wait(KEEP_EVERY_S):
        try:
            _size(pool, concurrency)
        except redis.RedisError as exc:  # the budget stays as it was until Redis answers again
            report("warm-pool", exc, log, "warm pool could not read the queue")
        except Exception:
            log.exception("warm pool sizing failed")
        pool.stop_idle()
        report_state(REPORT_KEY, pool.counts())


def _fill(pool: WarmPool) -> None:
    while not _stop.is_set():
        if not pool.fill():
            _stop.wait(0.2)


def start_pool(concurrency: int) -> WarmPool | None:
    """Creates, installs and keeps this process's pool; None when FARM_WARM_POOL is 0 or bubblewrap is
    missing (jobs then start their sandboxes cold)."""
    settings = get_settings()
    if settings.warm_pool <= 0:
        return None
    runtime = LocalRuntime()
    if not runtime.bwrap:
        log.warning("no warm pool: bubblewrap not found")
        return None
    _stop.clear()
    pool = WarmPool(runtime, settings.warm_pool_idle_s, shared_labels=(FARM_LABEL,))
    install(pool)
    threading.Thread(target=_keep, args=(pool, concurrency), name="warm-pool", daemon=True).start()
    for i in range(FILLERS):
        threading.Thread(target=_fill, args=(pool,), name=f"warm-pool-fill-{i}", daemon=True).start()
    return pool


def stop_pool() -> None:
    """Stops the fillers and every pooled sandbox (a claimed one is its job's)."""
    _stop.set()
    pool = installed()
    install(None)
    if pool is not None:
        pool.close()


@worker_ready.connect
def _start_with_worker(sender: Any = None, **kwargs: Any) -> None:
    if sender is None or "init" not in sender.app.amqp.queues.consume_from:
        return
    start_pool(int(getattr(sender.pool, "limit", None) or 1))


@worker_shutting_down.connect
def _stop_with_worker(**kwargs: Any) -> None:
    # In a thread: the worker's stop deadline (farm/workers.py) must not wait for the teardowns; what
    # is left when it exits is swept as the pool of a dead owner.
    threading.Thread(target=stop_pool, name="warm-pool-stop", daemon=True).start()
