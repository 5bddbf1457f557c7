"""Finds stages whose worker died (their lease stopped being renewed) and sends them again.

Runs as a thread in every worker's main process; the REAP script hands each expired lease to exactly
one reaper, so several workers reaping at once never double-send. A killed stage is resumed within
about LEASE_TTL_S + REAP_EVERY_S, whatever its length; Celery's own redelivery of the dead worker's
message (after the visibility timeout) is then refused by the stage's done/lease checks.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import redis
from celery.signals import worker_ready, worker_shutting_down

from tasks.monitor import mark_draining
from tasks.resume import resend
from tasks.services import job_store

log = logging.getLogger(__name__)
REAP_EVERY_S = 1.0
_stop = threading.Event()


def reap_once() -> int:
    store = job_store()
    reaped = store.reap()
    for lost in reaped:
        try:
            resend(store, lost.job_id, lost.stage, lost.infra_retries, lost.node)
        except Exception:
            log.exception("could not re-send %s of %s", lost.stage, lost.job_id)
    return len(reaped)


def _loop() -> None:
    while not _stop.wait(REAP_EVERY_S):
        try:
            reap_once()
        except redis.RedisError:
            log.warning("reaper could not reach Redis", exc_info=True)
        except Exception:
            log.exception("reaper round failed")


@worker_ready.connect
def _start_reaper(**kwargs: Any) -> None:
    threading.Thread(target=_loop, name="farm-reaper", daemon=True).start()


@worker_shutting_down.connect
def _drain(sender: Any = None, **kwargs: Any) -> None:
    _stop.set()
    if sender:
        mark_draining(str(sender))
