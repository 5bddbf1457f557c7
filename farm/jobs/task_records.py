"""The task API's records in Redis (a task fans out into `num_samples` sessions, each one job): the request
first stored, its session ids, whether every session was created, and the index of tasks. Operations
written once (farm/redis_ops.py), with their Lua beside them; the API runs them on its asyncio client.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import redis.asyncio as aioredis

from farm import keys
from farm.redis_ops import AsyncRunner, Command, Op, OpMethod, Script
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


RERUN_FIELD = "rerun:"
"""Task hash field prefix: `rerun:<sample>:<attempt>` -> {"session_id", "replaced", "reason"}."""
DELIVERED_FIELD = "delivered"


@dataclass(frozen=True)
class GroupRecord:
    reruns: dict[int, list[dict[str, str]]]
    """Sample index -> its re-runs in order."""
    delivered: dict[str, Any] | None
    created_at: float | None = None


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

    def open_group(self, task_id: str, now: float) -> Op[None]:
        """Marks the task a group to settle until delivered (farm/api/groups.py)."""
        yield Command(lambda r: r.zadd(keys.OPEN_GROUPS, {task_id: now}, nx=True))

    def close_group(self, task_id: str) -> Op[None]:
        yield Command(lambda r: r.zrem(keys.OPEN_GROUPS, task_id))

    def open_groups(self, limit: int) -> Op[list[str]]:
        """The oldest `limit` groups not delivered yet."""
        raw = yield Command(lambda r: r.zrange(keys.OPEN_GROUPS, 0, limit - 1))
        return [as_text(x) for x in raw]

    def group_record(self, task_id: str) -> Op[GroupRecord]:
        """The group's re-runs and delivery, as recorded so far (the stored request, which can be large, is
        not read: the settler reads this every tick)."""
        task = keys.task(task_id)
        names = [as_text(n) for n in (yield Command(lambda r: r.hkeys(task)))]
        wanted = [n for n in names if n.startswith(RERUN_FIELD) or n in (DELIVERED_FIELD, "created_at")]
        values = (yield Command(lambda r: r.hmget(task, wanted))) if wanted else []
        fields = {n: as_text(v) for n, v in zip(wanted, values, strict=True) if v is not None}
        found: list[tuple[int, int, dict[str, str]]] = []
        for name in (f for f in fields if f.startswith(RERUN_FIELD)):
            slot, attempt = (int(x) for x in name.removeprefix(RERUN_FIELD).split(":"))
            found.append((slot, attempt, json.loads(fields[name])))
        ordered: dict[int, list[dict[str, str]]] = {}
        for slot, _, entry in sorted(found, key=lambda e: (e[0], e[1])):
            ordered.setdefault(slot, []).append(entry)
        delivered = fields.get(DELIVERED_FIELD)
        created = fields.get("created_at")
        return GroupRecord(
            ordered,
            None if delivered is None else json.loads(delivered),
            None if created is None else float(created),
        )

    def add_rerun(self, task_id: str, slot: int, attempt: int, entry: dict[str, str]) -> Op[bool]:
        """Records the `attempt`-th re-run of sample `slot`; False if another settler recorded it first."""
        field = f"{RERUN_FIELD}{slot}:{attempt}"
        return bool((yield Command(lambda r: r.hsetnx(keys.task(task_id), field, json.dumps(entry)))))

    def deliver(self, task_id: str, delivery: dict[str, object]) -> Op[bool]:
        """Records the group's delivery once; False if it was delivered already."""
        raw = json.dumps(delivery)
        return bool((yield Command(lambda r: r.hsetnx(keys.task(task_id), DELIVERED_FIELD, raw))))

    def count(self) -> Op[int]:
        """Tasks in the index (those submitted within the result TTL)."""
        return int((yield Command(lambda r: r.zcard(keys.TASKS))))


class AsyncTaskStore:
    def __init__(self, client: aioredis.Redis) -> None:
        self.ops = TaskOps()
        self.runner = AsyncRunner(client)

    claim = OpMethod(TaskOps.claim)
    stored = OpMethod(TaskOps.stored)
    mark_submitted = OpMethod(TaskOps.mark_submitted)
    sessions = OpMethod(TaskOps.sessions)
    count = OpMethod(TaskOps.count)
    open_group = OpMethod(TaskOps.open_group)
    close_group = OpMethod(TaskOps.close_group)
    open_groups = OpMethod(TaskOps.open_groups)
    group_record = OpMethod(TaskOps.group_record)
    add_rerun = OpMethod(TaskOps.add_rerun)
    deliver = OpMethod(TaskOps.deliver)
