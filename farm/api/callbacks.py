"""Delivery of results to `callback_url`: POSTed by the API in the background, retried with
exponential backoff, never in the way of the pipeline; the result stays readable at /jobs/{id}
whatever happens to the callback.

Due deliveries sit in the `farm:callbacks` zset (scored by when they are due; FINALIZE adds them).
A sender claims a due job by pushing its score past the claim window in one Lua call, so several
API replicas never POST the same result at the same time.
"""

from __future__ import annotations

import asyncio
import logging
import time

import httpx
import redis.asyncio as aioredis

from farm import keys
from farm.jobs.store import AsyncJobStore

log = logging.getLogger(__name__)
POLL_S = 0.25
CLAIM_S = 30.0
MAX_ATTEMPTS = 8
BACKOFF_S = (1, 2, 4, 8, 16, 30, 60)

# KEYS: callbacks   ARGV: now, claim_until, limit
_CLAIM = """
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[3]))
for _, id in ipairs(due) do redis.call('ZADD', KEYS[1], ARGV[2], id) end
return due
"""


class CallbackSender:
    def __init__(self, client: aioredis.Redis, store: AsyncJobStore) -> None:
        self.r = client
        self.store = store
        self._claim = client.register_script(_CLAIM)

    async def run_forever(self) -> None:
        async with httpx.AsyncClient(timeout=10.0) as http:
            while True:
                try:
                    sent = await self.send_due(http)
                except asyncio.CancelledError:
                    raise
                except Exception:
                    log.warning("callback round failed", exc_info=True)
                    sent = 0
                if not sent:
                    await asyncio.sleep(POLL_S)

    async def send_due(self, http: httpx.AsyncClient, limit: int = 32) -> int:
        now = time.time()
        due = [d.decode() for d in await self._claim(keys=[keys.CALLBACKS], args=[now, now + CLAIM_S, limit])]
        await asyncio.gather(*(self._deliver(http, job_id) for job_id in due))
        return len(due)

    async def _deliver(self, http: httpx.AsyncClient, job_id: str) -> None:
        record = await self.store.get(job_id)
        url = record.fields.get("callback_url") if record else None
        if record is None or not url or record.result is None:
            await self.r.zrem(keys.CALLBACKS, job_id)
            return
        attempt = int(await self.r.hincrby(keys.job(job_id), "callback_attempts", 1))
        try:
            response = await http.post(
                url, content=record.result.model_dump_json(), headers={"content-type": "application/json"}
            )
            ok = response.status_code < 300
            reason = f"HTTP {response.status_code}"
        except httpx.HTTPError as exc:
            ok, reason = False, f"{type(exc).__name__}: {exc}"
        if ok:
            await self.r.zrem(keys.CALLBACKS, job_id)
            await self.r.hset(keys.job(job_id), "callback_state", "delivered")
            return
        if attempt >= MAX_ATTEMPTS:
            log.warning("giving up on the callback of %s after %d attempts (%s)", job_id, attempt, reason)
            await self.r.zrem(keys.CALLBACKS, job_id)
            await self.r.hset(
                keys.job(job_id), mapping={"callback_state": "failed", "callback_error": reason}
            )
            return
        delay = BACKOFF_S[min(attempt - 1, len(BACKOFF_S) - 1)]
        await self.r.zadd(keys.CALLBACKS, {job_id: time.time() + delay})
        await self.r.hset(keys.job(job_id), mapping={"callback_state": "retrying", "callback_error": reason})
