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
import redis.asyncio as aioredis

from farm import keys
from farm.jobs.store import AsyncJobStore
from farm.keys import JobField
from farm.outage import report
from farm.text import as_text

log = logging.getLogger(__name__)
IDLE_POLL_S = 5.0
IDLE_BUCKETS = 4
CLAIM_S = 30.0
MAX_ATTEMPTS = 8
BACKOFF_S = (1, 2, 4, 8, 16, 30, 60)

# KEYS: callbacks   ARGV: now, claim_until, limit
# Returns {due job ids (now claimed), score of the next delivery due or ''}.
_CLAIM = """
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[3]))
for _, id in ipairs(due) do redis.call('ZADD', KEYS[1], ARGV[2], id) end
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return {due, first[2] or ''}
"""

# The job hash may be gone by the time a delivery ends (its TTL ran out, an operator deleted it): every
# write checks that it exists, so no partial, TTL-less hash is ever made of callback fields alone.
# KEYS: job, callbacks   ARGV: job_id, attempts field   Returns the attempt number, 0 for a vanished job.
_COUNT_ATTEMPT = """
if redis.call('EXISTS', KEYS[1]) == 0 then redis.call('ZREM', KEYS[2], ARGV[1]) return 0 end
return redis.call('HINCRBY', KEYS[1], ARGV[2], 1)
"""
# KEYS: job, callbacks   ARGV: job_id, retry at ('' = done with it), field, value, field, value...
_RECORD_OUTCOME = """
if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('HSET', KEYS[1], unpack(ARGV, 3)) end
if ARGV[2] == '' or redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('ZREM', KEYS[2], ARGV[1])
else
  redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
end
return 1
"""


class CallbackSender:
    def __init__(self, client: aioredis.Redis, store: AsyncJobStore) -> None:
        self.r = client
        self.store = store
        self._claim = client.register_script(_CLAIM)
        self._count_attempt = client.register_script(_COUNT_ATTEMPT)
        self._record_outcome = client.register_script(_RECORD_OUTCOME)
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
        tags = self.store.layout.tags()
        turn = tags[self._turn : self._turn + IDLE_BUCKETS]
        self._turn = (self._turn + IDLE_BUCKETS) % len(tags)
        chosen = {self.store.layout.tag(job_id) for job_id in ended} | set(turn)
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
        for tag in self.store.layout.tags() if tags is None else tags:
            due, first = await self._claim(keys=[keys.callbacks(tag)], args=[now, now + CLAIM_S, limit])
            ids += [as_text(d) for d in due]
            self._next_due[tag] = float(first) if first not in (b"", "", None) else float("inf")
        await asyncio.gather(*(self._deliver(http, job_id) for job_id in ids))
        next_due = min(self._next_due.values(), default=float("inf"))
        return len(ids), next_due if next_due != float("inf") else None

    async def _deliver(self, http: httpx.AsyncClient, job_id: str) -> None:
        record = await self.store.get(job_id)
        url = record.fields.get(JobField.CALLBACK_URL) if record else None
        k = self.store.keys(job_id)
        if record is None or not url or record.result is None:
            await self.r.zrem(k.callbacks, job_id)
            return
        attempt = int(
            await self._count_attempt(keys=[k.job, k.callbacks], args=[job_id, JobField.CALLBACK_ATTEMPTS])
        )
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
            await self._outcome(job_id, None, (JobField.CALLBACK_STATE, "delivered"))
            return
        if attempt >= MAX_ATTEMPTS:
            log.warning("giving up on the callback of %s after %d attempts (%s)", job_id, attempt, reason)
            await self._outcome(
                job_id, None, (JobField.CALLBACK_STATE, "failed"), (JobField.CALLBACK_ERROR, reason)
            )
            return
        retry_at = time.time() + BACKOFF_S[min(attempt - 1, len(BACKOFF_S) - 1)]
        await self._outcome(
            job_id, retry_at, (JobField.CALLBACK_STATE, "retrying"), (JobField.CALLBACK_ERROR, reason)
        )

    async def _outcome(self, job_id: str, retry_at: float | None, *fields: tuple[str, str]) -> None:
        """Records a delivery's outcome on the job (if it still exists) and reschedules or unschedules it."""
        k = self.store.keys(job_id)
        flat = [item for pair in fields for item in pair]
        await self._record_outcome(
            keys=[k.job, k.callbacks], args=[job_id, "" if retry_at is None else retry_at, *flat]
        )
