"""Delivery of results to `callback_url`: POSTed by the API in the background, retried with
exponential backoff, never in the way of the pipeline; the result stays readable at /jobs/{id}
whatever happens to the callback.

Due deliveries sit in each job bucket's callbacks zset (scored by when they are due; FINALIZE adds them).
A sender claims a due job by pushing its score past the claim window in one Lua call, so several
API replicas never POST the same result at the same time. Between rounds it sleeps until the next
delivery is due, a job with a callback ends (the waiter's pub/sub wakes it with the job's id), or
IDLE_POLL_S passes (another replica's retries), so an idle API costs no Redis command per second for
callbacks. Each round claims only the job buckets (farm/keys.py) with a delivery known to be due, of a
job that just ended, or whose turn it is (IDLE_BUCKETS a round: a cluster's 16 are all read every
four idle polls; a plain Redis's one every time).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time

import httpx

from farm.background import raise_if_stopping
from farm.jobs.store import AsyncJobStore
from farm.outage import report

log = logging.getLogger(__name__)
IDLE_POLL_S = 5.0
IDLE_BUCKETS = 4
CLAIM_S = 30.0
MAX_ATTEMPTS = 8
BACKOFF_S = (1, 2, 4, 8, 16, 30, 60)


class CallbackSender:
    def __init__(self, store: AsyncJobStore) -> None:
        self.store = store
        self.deliveries = store.callbacks
        self._next_due: dict[str, float] = {}
        """bucket -> when its next delivery is due as last claimed (inf: none; absent: not read yet)."""
        self._turn = 0

    async def run_forever(self, wake: asyncio.Event | None = None, ended: set[str] | None = None) -> None:
        """Delivers due callbacks until cancelled; `wake` is set when a job with a callback ends, and
        `ended` then holds its id (the waiter's)."""
        wake = wake or asyncio.Event()
        ended = set() if ended is None else ended
        async with httpx.AsyncClient(timeout=10.0) as http:
            while True:
                raise_if_stopping()
                wake.clear()
                try:
                    sent, next_due = await self.send_due(http, tags=self._round(ended))
                except asyncio.CancelledError:
                    raise
                except Exception as exc:
                    report("callback sender", exc, log, "callback round failed")
                    sent, next_due = 0, None
                if sent:
                    continue
                pause = IDLE_POLL_S if next_due is None else min(IDLE_POLL_S, next_due - time.time())
                if pause > 0:
                    with contextlib.suppress(TimeoutError):
                        async with asyncio.timeout(pause):
                            await wake.wait()

    def _round(self, ended: set[str]) -> list[str]:
        """The buckets this round claims from (see the module docstring); empties `ended`."""
        tags = self.deliveries.buckets()
        turn = tags[self._turn : self._turn + IDLE_BUCKETS]
        self._turn = (self._turn + IDLE_BUCKETS) % len(tags)
        chosen = {self.deliveries.bucket_of(job_id) for job_id in ended} | set(turn)
        ended.clear()
        now = time.time()
        return [t for t in tags if t in chosen or self._next_due.get(t, 0.0) <= now]

    async def send_due(
        self, http: httpx.AsyncClient, limit: int = 32, tags: list[str] | None = None
    ) -> tuple[int, float | None]:
        """Sends what is due now in the buckets `tags` (default all); returns how many, and when the
        next one is due (None: nothing is, as far as this sender knows)."""
        now = time.time()
        ids: list[str] = []
        for tag in self.deliveries.buckets() if tags is None else tags:
            due, self._next_due[tag] = await self.deliveries.claim_due(tag, now, now + CLAIM_S, limit)
            ids += due
        await asyncio.gather(*(self._deliver(http, job_id) for job_id in ids))
        next_due = min(self._next_due.values(), default=float("inf"))
        return len(ids), next_due if next_due != float("inf") else None

    async def _deliver(self, http: httpx.AsyncClient, job_id: str) -> None:
        record = await self.store.get(job_id)
        url = record.callback_url if record else None
        if record is None or not url or record.result is None:
            await self.deliveries.unschedule(job_id)
            return
        attempt = await self.deliveries.count_attempt(job_id)
        if not attempt:
            return
        try:
            response = await http.post(
                url, content=record.result.model_dump_json(), headers={"content-type": "application/json"}
            )
            ok = response.status_code < 300
            reason = f"HTTP {response.status_code}"
        except httpx.HTTPError as exc:
            ok, reason = False, f"{type(exc).__name__}: {exc}"
        if ok:
            await self.deliveries.record_outcome(job_id, "delivered")
            return
        if attempt >= MAX_ATTEMPTS:
            log.warning("giving up on the callback of %s after %d attempts (%s)", job_id, attempt, reason)
            await self.deliveries.record_outcome(job_id, "failed", reason)
            return
        retry_at = time.time() + BACKOFF_S[min(attempt - 1, len(BACKOFF_S) - 1)]
        await self.deliveries.record_outcome(job_id, "retrying", reason, retry_at)
