"""Callback deliveries in Redis: each job bucket's callbacks zset (job id -> when its result should next be
POSTed; FINALIZE adds a job with a callback_url) and the job hash's callback fields. The operations and
their Lua, written once (farm/redis_ops.py); the API's callback sender (farm/api/callback_sender.py) runs
them."""

from __future__ import annotations

from typing import Literal

import redis.asyncio as aioredis

from farm import keys
from farm.keys import JobField, Layout
from farm.redis_ops import AsyncRunner, Command, Op, OpMethod, Script
from farm.text import as_text

# KEYS: callbacks   ARGV: now, claim_until, limit
# Returns {due job ids (now claimed), score of the next delivery due or ''}.
CLAIM = """
local due = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', ARGV[1], 'LIMIT', 0, tonumber(ARGV[3]))
for _, id in ipairs(due) do redis.call('ZADD', KEYS[1], ARGV[2], id) end
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return {due, first[2] or ''}
"""

# The job hash may be gone by the time a delivery ends (its TTL ran out, an operator deleted it): every
# write checks that it exists, so no partial, TTL-less hash is ever made of callback fields alone.
# KEYS: job, callbacks   ARGV: job_id, attempts field   Returns the attempt number, 0 for a vanished job.
COUNT_ATTEMPT = """
if redis.call('EXISTS', KEYS[1]) == 0 then redis.call('ZREM', KEYS[2], ARGV[1]) return 0 end
return redis.call('HINCRBY', KEYS[1], ARGV[2], 1)
"""
# KEYS: job, callbacks   ARGV: job_id, retry at ('' = done with it), field, value, field, value...
RECORD_OUTCOME = """
if redis.call('EXISTS', KEYS[1]) == 1 then redis.call('HSET', KEYS[1], unpack(ARGV, 3)) end
if ARGV[2] == '' or redis.call('EXISTS', KEYS[1]) == 0 then
  redis.call('ZREM', KEYS[2], ARGV[1])
else
  redis.call('ZADD', KEYS[2], ARGV[2], ARGV[1])
end
return 1
"""
CallbackState = Literal["delivered", "retrying", "failed"]


class CallbackOps:
    def __init__(self, layout: Layout) -> None:
        self.layout = layout

    def claim_due(self, tag: str, now: float, claim_until: float, limit: int) -> Op[tuple[list[str], float]]:
        """Claims up to `limit` deliveries of bucket `tag` due by `now` (pushed past the claim window, so
        another API replica does not take them too); the ids and when the bucket's next delivery is due
        (inf: none)."""
        args = [now, claim_until, limit]
        due, first = yield Script(CLAIM, [keys.callbacks(tag)], args)
        return [as_text(d) for d in due], float(first) if first not in (b"", "", None) else float("inf")

    def unschedule(self, job_id: str) -> Op[None]:
        """No delivery for this job (gone, no callback_url, no result)."""
        k = self.layout.job_keys(job_id)
        yield Command(lambda r: r.zrem(k.callbacks, job_id))

    def count_attempt(self, job_id: str) -> Op[int]:
        """This delivery's attempt number; 0 when the job vanished (then unscheduled)."""
        k = self.layout.job_keys(job_id)
        args = [job_id, JobField.CALLBACK_ATTEMPTS]
        return int((yield Script(COUNT_ATTEMPT, [k.job, k.callbacks], args)))

    def record_outcome(
        self, job_id: str, state: CallbackState, error: str | None = None, retry_at: float | None = None
    ) -> Op[None]:
        """Records how a delivery ended on the job (if it still exists) and reschedules it at `retry_at`
        or unschedules it."""
        k = self.layout.job_keys(job_id)
        args = [job_id, "" if retry_at is None else retry_at, JobField.CALLBACK_STATE, state]
        args += [] if error is None else [JobField.CALLBACK_ERROR, error]
        yield Script(RECORD_OUTCOME, [k.job, k.callbacks], args)


class AsyncCallbackStore:
    def __init__(self, client: aioredis.Redis, layout: Layout) -> None:
        self.layout = layout
        self.ops = CallbackOps(layout)
        self.runner = AsyncRunner(client)

    def buckets(self) -> list[str]:
        return self.layout.tags()

    def bucket_of(self, job_id: str) -> str:
        return self.layout.tag(job_id)

    claim_due = OpMethod(CallbackOps.claim_due)
    unschedule = OpMethod(CallbackOps.unschedule)
    count_attempt = OpMethod(CallbackOps.count_attempt)
    record_outcome = OpMethod(CallbackOps.record_outcome)
