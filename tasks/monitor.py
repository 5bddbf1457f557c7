"""The job monitor of one worker process: renews the leases of the stages running here and watches,
for all of them at once, whether they were cancelled or must be given back because the worker is
shutting down. Stages ask it (no Redis round trip) at every `ctx.check()`, so a cancel reaches a
running agent within one poll interval (POLL_S) on any Celery pool."""

from __future__ import annotations

import contextlib
import logging
import os
import threading
import time

import redis

from farm.jobs.store import LEASE_TTL_S, JobStore
from farm.outage import report

log = logging.getLogger(__name__)
POLL_S = 0.2
RENEW_EVERY_S = LEASE_TTL_S / 3
FENCE_MARGIN_S = 1.0
"""A stage whose lease this worker could not renew stops by its own clock FENCE_MARGIN_S before the lease
can have expired in Redis (the expiry is the renewal's send time + LEASE_TTL_S), so a node cut off from
Redis never runs a stage on while the reaper hands it to another node (tests/nodes/test_partitions.py)."""


class JobMonitor:
    def __init__(self, store: JobStore) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._leases: dict[str, int] = {}
        """Per job: the token of its newest attempt here, the one whose lease is renewed (the reaper may have
        given a stalled stage's job to a new attempt while the old one still runs here)."""
        self._revoked: set[str] = set()
        self._lost: set[str] = set()
        self._valid_until: dict[str, float] = {}
        """Per job: the monotonic time past which this attempt may no longer hold its lease."""
        self._hostname: str | None = None
        self._draining = False
        self._pid = -1
        self._thread: threading.Thread | None = None

    def enter(self, job_id: str, token: int, hostname: str | None, granted_at: float | None = None) -> None:
        """`granted_at`: the monotonic time at which the stage's BEGIN was sent (its lease runs from then)."""
        with self._lock:
            if token < self._leases.get(job_id, token):
                return  # an attempt older than one already here keeps the newer one's lease
            self._leases[job_id] = token
            start = time.monotonic() if granted_at is None else granted_at
            self._valid_until[job_id] = start + LEASE_TTL_S - FENCE_MARGIN_S
            self._revoked.discard(job_id)
            self._lost.discard(job_id)
            self._hostname = hostname or self._hostname
            if self._pid != os.getpid():  # first use in this process (or a forked pool child)
                self._pid = os.getpid()
                self._thread = threading.Thread(target=self._loop, name="farm-job-monitor", daemon=True)
                self._thread.start()

    def leave(self, job_id: str, token: int) -> None:
        with self._lock:
            if self._leases.get(job_id) != token:
                return  # a superseded attempt ends: the newer one keeps its lease
            self._leases.pop(job_id, None)
            self._valid_until.pop(job_id, None)
            self._revoked.discard(job_id)
            self._lost.discard(job_id)

    def drain(self) -> None:
        self._draining = True

    def interruption(self, job_id: str) -> str | None:
        """'lost', 'draining', 'revoked' or None, in that order of precedence."""
        with self._lock:
            if job_id in self._lost:
                return "lost"
            if time.monotonic() > self._valid_until.get(job_id, float("inf")):
                self._lost.add(job_id)  # not renewed in time (Redis unreachable): it may be reaped now
                log.warning("could not renew the lease of %s in time; stopping its stage", job_id)
                return "lost"
            if self._draining:
                return "draining"
            if job_id in self._revoked:
                return "revoked"
            return None

    def _loop(self) -> None:
        last_renew = time.monotonic()
        held = False
        while True:
            time.sleep(POLL_S)
            with self._lock:
                leases = dict(self._leases)
            if not leases:
                held = False
                continue
            try:
                # renewal first: over a slow link the checks below must not push it past the fence
                lost: set[str] = set()
                renewed_from = None
                since = time.monotonic() - last_renew
                if since >= RENEW_EVERY_S:
                    late = held and since > LEASE_TTL_S - FENCE_MARGIN_S  # no CPU or GIL for this thread
                    if late:
                        log.warning(
                            "job monitor renewing %.1f s after its last renewal: leases may expire", since
                        )
                    renewed_from = time.monotonic()
                    lost = self.store.renew(leases)
                    last_renew = time.monotonic()
                held = True
                revoked = self.store.revoked_among(list(leases))
                if self._hostname and not self._draining and self.store.is_draining(self._hostname):
                    self._draining = True
                with self._lock:
                    if renewed_from is not None:
                        for job_id, token in leases.items():
                            if job_id not in lost and self._leases.get(job_id) == token:
                                self._valid_until[job_id] = renewed_from + LEASE_TTL_S - FENCE_MARGIN_S
                    self._revoked |= revoked & self._leases.keys()
                    # Only if the same attempt still runs: a stage that just ended gave its lease back.
                    self._lost |= {j for j in lost if self._leases.get(j) == leases[j]}
                if lost:  # also the moment between a stage giving its lease back and leaving the monitor
                    log.info("no longer holding the lease of %s", ", ".join(sorted(lost)))
            except redis.RedisError as exc:
                report("job monitor", exc, log, "job monitor could not reach Redis")


_monitor: JobMonitor | None = None
_monitor_lock = threading.Lock()


def job_monitor() -> JobMonitor:
    global _monitor
    with _monitor_lock:
        if _monitor is None:
            from tasks.services import job_store

            _monitor = JobMonitor(job_store())
        return _monitor


def mark_draining(hostname: str) -> None:
    """Called in the worker's main process when shutdown starts; pool children see it via Redis."""
    job_monitor().drain()
    with contextlib.suppress(redis.RedisError):
        job_monitor().store.mark_draining(hostname)
