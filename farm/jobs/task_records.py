"""The task API's records in Redis (a task fans out into `num_samples` sessions, each one job): the request
first stored, its session ids, whether every session was created, and the index of tasks. Operations
written once (farm/redis_ops.py), with their Lua beside them; the API runs them on its asyncio client.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

import redis.asyncio as aioredis

from farm import keys
from farm.redis_ops import AsyncOp, AsyncRunner, Command, Op, Script
from farm.text import as_text

# The task record appears whole or not at all; `submitted` is set only once every session exists.
# The index of tasks drops the entries whose records have expired (older than the TTL) as it grows.
# KEYS: task, tasks index   ARGV: request, session ids (JSON), now, ttl_s, task_id
CLAIM_TASK = """
if redis.call('HSETNX', KEYS[1], 'request', ARGV[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'session_ids', ARGV[2], 'created_at', ARGV[3])
redis.call('EXPIRE', KEYS[1], ARGV[4])
redis.call('ZADD', KEYS[2], ARGV[3], ARGV[5])
redis.call('ZREMRANGEBYSCORE', KEYS[2], '-inf', '(' .. (tonumber(ARGV[3]) - tonumber(ARGV[4])))
return 1
"""


@dataclass(frozen=True)
class StoredTask:
    request: str | None
    """The request first stored (None: the task is unknown or expired)."""
    submitted: bool
    """Every session was created."""


class TaskOps:
    def claim(self, task_id: str, request: str, session_ids: list[str], now: float, ttl_s: int) -> Op[bool]:
        """Records a new task whole; False when a task with this id exists (or existed within the TTL)."""
        args: list[str | int] = [request, json.dumps(session_ids), str(now), ttl_s, task_id]
        return bool((yield Script(CLAIM_TASK, [keys.task(task_id), keys.TASKS], args)))

    def stored(self, task_id: str) -> Op[StoredTask]:
        task = keys.task(task_id)
        request, submitted = yield Command(lambda r: r.hmget(task, "request", "submitted"))
        return StoredTask(None if request is None else as_text(request), submitted is not None)

    def mark_submitted(self, task_id: str) -> Op[None]:
        yield Command(lambda r: r.hset(keys.task(task_id), "submitted", "1"))

    def sessions(self, task_id: str) -> Op[tuple[list[str], bool] | None]:
        """The task's session ids and whether they were all created; None for an unknown task."""
        task = keys.task(task_id)
        raw, submitted = yield Command(lambda r: r.hmget(task, "session_ids", "submitted"))
        return None if raw is None else (list(json.loads(raw)), submitted is not None)

    def count(self) -> Op[int]:
        """Tasks in the index (those submitted within the result TTL)."""
        return int((yield Command(lambda r: r.zcard(keys.TASKS))))


class AsyncTaskStore:
    def __init__(self, client: aioredis.Redis) -> None:
        self.ops = TaskOps()
        self.runner = AsyncRunner(client)

    claim = AsyncOp(TaskOps.claim)
    stored = AsyncOp(TaskOps.stored)
    mark_submitted = AsyncOp(TaskOps.mark_submitted)
    sessions = AsyncOp(TaskOps.sessions)
    count = AsyncOp(TaskOps.count)
