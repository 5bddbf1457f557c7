"""The viewer's reads of the job store: the `farm:jobs:index` zset (every job by creation time, written by
CREATE) and the few fields of each job a row shows, pulled by one Lua call per hash-tag bucket. Written
once (farm/redis_ops.py); the viewer (farm/ui/) pages through them.
"""

from __future__ import annotations

from typing import Any

import redis.asyncio as aioredis

from farm import keys
from farm.keys import Layout
from farm.redis_ops import AsyncRunner, Command, Op, OpMethod, Script
from farm.text import as_text_or_none as _s

# KEYS: job hashes. Per job: state, spec, created_at, finished_at, t_queued, t_init, t_run, t_eval, node,
# reward, error stage, error type (false where absent; state false when the job expired).
# JobResult serializes `reward` right after job_id/state/handler, so it sits in the first bytes; the
# error object is the first `"error":{"stage":` key (inside JSON strings every quote is escaped).
ROWS = """
local out = {}
for i, key in ipairs(KEYS) do
  local f = redis.call('HMGET', key, 'state', 'spec', 'created_at', 'finished_at',
                       't_queued', 't_init', 't_run', 't_eval', 'node', 'result')
  local result = f[10]
  f[10] = false
  f[11] = false
  f[12] = false
  if result then
    f[10] = string.match(string.sub(result, 1, 2048), '"reward":([^,}]+)') or false
    local at = string.find(result, '"error":{"stage":"', 1, true)
    if at then
      local stage, kind = string.match(result, '^"error":{"stage":"([^"]*)","type":"([^"]*)"', at)
      f[11] = stage or false
      f[12] = kind or false
    end
  end
  out[i] = f
end
return out
"""


class IndexOps:
    def __init__(self, layout: Layout) -> None:
        self.layout = layout

    def rows(self, job_ids: list[str]) -> Op[dict[str, list[Any]]]:
        """Each job's row fields (see ROWS), one script call per bucket of the jobs (a cluster runs a
        script only over keys of one slot)."""
        buckets: dict[str, list[str]] = {}
        for job_id in job_ids:
            buckets.setdefault(self.layout.tag(job_id), []).append(job_id)
        fields: dict[str, list[Any]] = {}
        for ids in buckets.values():
            raw = yield Script(ROWS, [self.layout.job(j) for j in ids])
            fields.update(zip(ids, raw, strict=True))
        return fields

    def newest(self, limit: int) -> Op[list[str]]:
        members = yield Command(lambda r: r.zrevrange(keys.JOBS_INDEX, 0, limit - 1))
        return [_s(m) or "" for m in members]

    def older_than(self, top: str, count: int) -> Op[list[tuple[str, float]]]:
        """Up to `count` jobs created at or before `top` (a score, '(score' to exclude it, or '+inf'),
        newest first, with their creation times."""
        chunk = yield Command(
            lambda r: r.zrevrangebyscore(keys.JOBS_INDEX, top, "-inf", start=0, num=count, withscores=True)
        )
        return [(_s(member) or "", float(score)) for member, score in chunk]

    def size(self) -> Op[int]:
        """Jobs in the index (ZCARD, O(1))."""
        return int((yield Command(lambda r: r.zcard(keys.JOBS_INDEX))))


class AsyncJobIndex:
    def __init__(self, client: aioredis.Redis, layout: Layout) -> None:
        self.ops = IndexOps(layout)
        self.runner = AsyncRunner(client)

    rows = OpMethod(IndexOps.rows)
    newest = OpMethod(IndexOps.newest)
    older_than = OpMethod(IndexOps.older_than)
    size = OpMethod(IndexOps.size)
