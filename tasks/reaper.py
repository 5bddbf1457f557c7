"""Finds stages whose worker died (their lease stopped being renewed) and sends them again.

Runs as a thread in every worker's main process. One of them leads at a time (a Redis key taken with
SET NX for LEAD_S) and reaps every REAP_EVERY_S; the others only try to take the lead when it lapses,
so an idle farm costs a few commands a second whatever its size. Leading is an economy, not a safety
rule: the REAP script hands each expired lease to exactly one reaper, so two workers that both believe
they lead never double-send. A killed stage is resumed within about LEASE_TTL_S + LEAD_S, whatever its
length (on a Redis Cluster up to 3 s more: REAP_BUCKETS_PER_ROUND). The broker keeps no copy of a
delivered message (no ack emulation, farm/celery_app.py): a message a worker took and died with
before its stage began is found by the stall sweep.
"""

from __future__ import annotations

import base64
import contextlib
import json
import logging
import threading
import time
from typing import TYPE_CHECKING, Any

import redis
from celery.signals import worker_ready, worker_shutting_down

from farm import keys
from farm.models.results import STAGES
from farm.outage import report
from farm.settings import get_settings
from farm.workers import live_run_queues
from tasks.monitor import mark_draining
from tasks.orphans import sweep_due, sweep_orphan_sandboxes
from tasks.resume import resend
from tasks.services import job_store, stage_messages

if TYPE_CHECKING:
    from farm.jobs.store import JobStore

log = logging.getLogger(__name__)
REAP_EVERY_S = 1.0
LEAD_S = 3.0
"""How long one lead lasts; the others try to take it twice per term."""
REAP_BUCKETS_PER_ROUND = 4
"""Hash-tag buckets of jobs (farm/keys.py) whose leases one round reads: all of a plain Redis's one,
a quarter of a cluster's 16 (each every 4 s: a killed stage is resumed up to 3 s later there, and the
idle farm reads 4 lease indexes a second, not 16)."""
SWEEP_ATTEMPT_EVERY_S = 5.0
"""Each worker tries for its host's orphan-sandbox sweep lock this often (the sweep runs every
SWEEP_EVERY_S per host)."""
_stop = threading.Event()


_next_bucket = 0


def reap_once() -> int:
    global _next_bucket
    store = job_store()
    tags = store.buckets()
    share = tags[_next_bucket : _next_bucket + REAP_BUCKETS_PER_ROUND]
    _next_bucket = (_next_bucket + REAP_BUCKETS_PER_ROUND) % len(tags)
    reaped = store.reap(tags=share)
    for lost in reaped:
        try:
            resend(store, lost.job_id, lost.stage, lost.infra_retries, lost.node)
        except Exception:
            log.exception("could not re-send %s of %s", lost.stage, lost.job_id)
    return len(reaped)


def _queued_stage(message: dict[str, Any]) -> tuple[str, str] | None:
    """(job id, stage) of a kombu message of a farm stage task, else None."""
    try:
        name = message["headers"]["task"]
        if not name.startswith("farm.") or name.removeprefix("farm.") not in STAGES:
            return None
        args = json.loads(base64.b64decode(message["body"]))[0]
        return str(args[0]), name.removeprefix("farm.")
    except (ValueError, KeyError, IndexError, TypeError):
        return None


def resend_if_stuck(store: JobStore, job_id: str, stage: str | None = None) -> bool:
    """Send `stage` (default: the job's first unfinished stage) again unless the job ended, that stage
    is done, or a live attempt holds the lease. Counted as an infrastructure retry."""
    record = store.get(job_id)
    if record is None or record.state.terminal or record.leased:
        return False
    stage = stage or next((s for s in STAGES if not record.stage_done(s)), None)
    if stage is None or record.stage_done(stage):
        return False
    retries = store.count_infra_retry(job_id)
    if retries < 0:  # gone meanwhile
        return False
    resend(store, job_id, stage, retries, record.node or "")
    return True


def _jobs_with_messages(store: JobStore) -> set[str]:
    """Job ids with a stage message waiting in a queue some live worker consumes."""
    queues = ["init", "run", "eval", *sorted(live_run_queues())]
    lists = [key for queue in queues for key in stage_messages().queue_keys(queue)]
    found = set()
    for raw in store.queued_messages(lists):
        with contextlib.suppress(ValueError, TypeError):
            if stage := _queued_stage(json.loads(raw)):
                found.add(stage[0])
    return found


def sweep_stalled(grace_s: float | None = None) -> int:
    """Jobs waiting past the grace period with no running stage whose stage message is nowhere: a
    worker died holding the message before its stage began (taken off the queue, not yet started), or
    a reaper or draining worker died between giving a lost stage's lease back and sending it again
    (recording a job and ending a stage enqueue the next message atomically). Send it again.
    At most one worker sweeps per half grace period (the scan reads every queue)."""
    store = job_store()
    grace = get_settings().stall_grace_s if grace_s is None else grace_s
    if not store.take_lock(keys.STALL_SWEEP, "1", max(1000, int(grace * 500))):
        return 0
    store.prune_index()
    now = time.time()
    active = store.active_ids()
    suspects = [job_id for job_id, since in store.queued_since(active).items() if now - since > grace]
    if not suspects:
        return 0
    present = _jobs_with_messages(store)
    return sum(resend_if_stuck(store, j) for j in suspects if j not in present)


class _Lead:
    """Whether this worker's reaper leads now (see the module docstring)."""

    def __init__(self, hostname: str) -> None:
        self.hostname = hostname
        self.until = 0.0
        self.next_try = 0.0
        self.next_stall_sweep = 0.0
        """The stall sweep's own lock spaces sweeps by half a grace period; trying it every round
        would cost a command a second for nothing."""

    def holds(self, store: JobStore) -> bool:
        now = time.monotonic()
        if now < self.until:
            return True
        if now < self.next_try:
            return False
        self.next_try = now + LEAD_S / 2
        if store.take_lock(keys.REAPER, self.hostname, int(LEAD_S * 1000)):
            self.until = now + LEAD_S - REAP_EVERY_S / 2
            return True
        return False


def _round(lead: _Lead, next_orphan_try: float) -> float:
    """One reaper round; returns when this worker next tries for its host's orphan sweep."""
    store = job_store()
    if lead.holds(store):
        reap_once()
        if time.monotonic() >= lead.next_stall_sweep:
            lead.next_stall_sweep = time.monotonic() + max(REAP_EVERY_S, get_settings().stall_grace_s / 4)
            sweep_stalled()
    if time.monotonic() >= next_orphan_try:
        next_orphan_try = time.monotonic() + SWEEP_ATTEMPT_EVERY_S
        if sweep_due(store):
            sweep_orphan_sandboxes(store)
    return next_orphan_try


def _loop(hostname: str) -> None:
    lead = _Lead(hostname)
    next_orphan_try = 0.0
    while not _stop.wait(REAP_EVERY_S):
        try:
            next_orphan_try = _round(lead, next_orphan_try)
        except redis.RedisError as exc:
            report("reaper", exc, log, "reaper could not reach Redis")
        except Exception:
            log.exception("reaper round failed")


@worker_ready.connect
def _start_reaper(sender: Any = None, **kwargs: Any) -> None:
    hostname = str(getattr(sender, "hostname", "") or get_settings().node)
    if sender is not None:  # a worker restarted under the same name is not draining
        job_store().clear_draining(hostname)
    threading.Thread(target=_loop, args=(hostname,), name="farm-reaper", daemon=True).start()


@worker_shutting_down.connect
def _drain(sender: Any = None, **kwargs: Any) -> None:
    _stop.set()
    if sender:
        mark_draining(str(sender))
