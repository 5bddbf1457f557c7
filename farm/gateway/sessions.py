"""Gateway sessions in Redis: metadata and state, an append-only completion log, rewards, one TTL. Their
operations are written once (farm/redis_ops.py), like the job store's."""

from __future__ import annotations

import json
import secrets
import time
from collections import OrderedDict
from typing import Any, Literal

import redis.asyncio as aioredis
from pydantic import BaseModel, Field
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
from redis.client import Pipeline

from farm import keys
from farm.agent.parse_outcomes import UNKNOWN_FAMILY, classify_reply, stats_key
from farm.builders.records import CompletionRecord
from farm.redis_ops import AsyncRunner, Batch, Command, Op, OpMethod, Script

SessionState = Literal["open", "ended"]


class SessionInfo(BaseModel):
    session_id: str
    task_id: str | None = None
    state: SessionState = "open"
    created_at: float
    ended_at: float | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class SessionNotFound(KeyError):
    pass


class SessionEnded(RuntimeError):
    pass


class NoCompletion(LookupError):
    """A reward names a completion the session does not have (or the session has none yet)."""


# KEYS: session hash, completions list, ids set[, stats hash]
# ARGV: record json, ttl, completion id[, call field, parse outcome field]
# The record's index, or -1 (no session). Appending is idempotent by completion id, so a command retried
# after a connection broke under it never logs (nor counts) a turn twice. With a stats key, counts the call
# and its tool-call parse outcome there.
_APPEND = """
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
if redis.call('SADD', KEYS[3], ARGV[3]) == 0 then return redis.call('LLEN', KEYS[2]) - 1 end
local length = redis.call('RPUSH', KEYS[2], ARGV[1])
redis.call('EXPIRE', KEYS[2], ARGV[2])
redis.call('EXPIRE', KEYS[3], ARGV[2])
redis.call('EXPIRE', KEYS[1], ARGV[2])
if KEYS[4] then
  redis.call('HINCRBY', KEYS[4], ARGV[4], 1)
  redis.call('HINCRBY', KEYS[4], ARGV[5], 1)
end
return length - 1
"""


# KEYS: session hash, failure list   ARGV: record json, ttl. The failure's index, or -1 (no session).
_APPEND_FAILURE = """
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
local length = redis.call('RPUSH', KEYS[2], ARGV[1])
redis.call('EXPIRE', KEYS[2], ARGV[2])
return length - 1
"""


def _parse_counter(record: CompletionRecord) -> str:
    """The stats field of the call's tool-call parse outcome (/metrics farm_tool_call_parse_outcomes), as
    its trace's `turn_parses` classifies it; family `unknown`, as the trace records none."""
    parse = classify_reply(0, record.response_message, record.tools)
    return stats_key(UNKNOWN_FAMILY, parse.parser, parse.outcome)


class SessionOps:
    """The operations on gateway sessions (farm/redis_ops.py), their keys farm/keys.py's `session`. A
    session's keys share the hash tag of its id, so its scripts and transactions run on a Redis Cluster;
    there the farm-wide call counter is written apart from them (`count_apart`)."""

    def __init__(self, ttl_s: int, count_apart: bool) -> None:
        self.ttl_s = ttl_s
        self.count_apart = count_apart

    def create(self, info: SessionInfo) -> Op[bool]:
        """Records a new open session; False if one with its id exists."""
        key, ttl = keys.session(info.session_id).info, self.ttl_s

        def queue(pipe: Pipeline) -> None:
            pipe.hsetnx(key, "info", info.model_dump_json(exclude={"state", "ended_at"}))
            pipe.hsetnx(key, "state", "open")
            pipe.expire(key, ttl)

        created, _, _ = yield Batch(queue, transaction=True)
        return bool(created)

    def get(self, sid: str) -> Op[SessionInfo]:
        key = keys.session(sid).info
        raw = {_text(k): _text(v) for k, v in (yield Command(lambda r: r.hgetall(key))).items()}
        if "info" not in raw:
            raise SessionNotFound(sid)
        info = SessionInfo.model_validate_json(raw["info"])
        info.state = "ended" if raw.get("state") == "ended" else "open"
        if "ended_at" in raw:
            info.ended_at = float(raw["ended_at"])
        return info

    def append_completion(self, record: CompletionRecord) -> Op[int]:
        """Append to the log (one round trip, idempotent by completion id); a call in flight when the session
        ended is still kept. Returns its index."""
        k = keys.session(record.session_id)
        script_keys = [k.info, k.completions, k.ids]
        args: list[str | int] = [record.model_dump_json(exclude={"reward"}), self.ttl_s, record.completion_id]
        counters = [f"gateway_calls:{record.provider}", _parse_counter(record)]  # for /metrics
        if not self.count_apart:
            script_keys.append(keys.STATS)
            args.extend(counters)
        index = int((yield Script(_APPEND, script_keys, args)))
        if index < 0:
            raise SessionNotFound(record.session_id)
        if self.count_apart:  # a retried append counts again here: the cluster's counts are at least once

            def queue(pipe: Pipeline) -> None:
                for counter in counters:
                    pipe.hincrby(keys.STATS, counter, 1)

            yield Batch(queue)
        return index

    def append_failure(self, record: CompletionRecord) -> Op[bool]:
        """Log a failed call (its `error` set) apart from the completions; False if the session is gone."""
        k = keys.session(record.session_id)
        args: list[str | int] = [record.model_dump_json(exclude={"reward"}), self.ttl_s]
        return int((yield Script(_APPEND_FAILURE, [k.info, k.failed], args))) >= 0

    def failures(self, sid: str) -> Op[list[CompletionRecord]]:
        """The failed calls in the order they happened."""
        failed = keys.session(sid).failed
        raw = yield Command(lambda r: r.lrange(failed, 0, -1))
        return [CompletionRecord.model_validate_json(item) for item in raw]

    def completions(self, sid: str) -> Op[list[CompletionRecord]]:
        """The log in insertion order, with rewards filled in."""
        k = keys.session(sid)

        def queue(pipe: Pipeline) -> None:
            pipe.exists(k.info)
            pipe.lrange(k.completions, 0, -1)
            pipe.hgetall(k.rewards)

        exists, raw, reward_map = yield Batch(queue)
        if not exists:
            raise SessionNotFound(sid)
        rewards_by_id = {_text(cid): _text(v) for cid, v in reward_map.items()}
        out: list[CompletionRecord] = []
        for index, item in enumerate(raw):
            record = CompletionRecord.model_validate_json(item)
            record.index = index
            value = rewards_by_id.get(record.completion_id)
            record.reward = float(value) if value is not None else None
            out.append(record)
        return out

    def completion_count(self, sid: str) -> Op[int]:
        completions = keys.session(sid).completions
        return int((yield Command(lambda r: r.llen(completions))))

    def set_reward(self, sid: str, reward: float, completion_id: str | None = None) -> Op[str]:
        """Reward one completion (the last one when no id is given); returns the id rewarded."""
        k, ttl = keys.session(sid), self.ttl_s
        if not (yield Command(lambda r: r.exists(k.info))):
            raise SessionNotFound(sid)
        if completion_id is None:
            last = yield Command(lambda r: r.lindex(k.completions, -1))
            if last is None:
                raise NoCompletion("the session has no completion to reward yet")
            completion_id = CompletionRecord.model_validate_json(last).completion_id
        else:
            logged = yield Command(lambda r: r.lrange(k.completions, 0, -1))
            if completion_id not in [CompletionRecord.model_validate_json(x).completion_id for x in logged]:
                raise NoCompletion(f"no completion {completion_id!r} in this session")
        rewarded = completion_id

        def queue(pipe: Pipeline) -> None:
            pipe.hset(k.rewards, rewarded, json.dumps(float(reward)))
            pipe.expire(k.rewards, ttl)

        yield Batch(queue, transaction=True)
        return rewarded

    def end(self, sid: str) -> Op[int]:
        """Mark ended (idempotent); returns the number of recorded completions."""
        k = keys.session(sid)
        if not (yield Command(lambda r: r.exists(k.info))):
            raise SessionNotFound(sid)

        def queue(pipe: Pipeline) -> None:
            pipe.hset(k.info, "state", "ended")
            pipe.hsetnx(k.info, "ended_at", str(time.time()))
            pipe.llen(k.completions)

        _, _, count = yield Batch(queue, transaction=True)
        return int(count)

    def delete(self, sid: str) -> Op[None]:
        k = keys.session(sid)
        yield Command(lambda r: r.delete(k.info, k.completions, k.rewards, k.failed, k.ids))


class SessionStore:
    """The gateway's sessions (SessionOps on its asyncio client), and the ones this process last read or
    wrote (`cached`)."""

    def __init__(self, redis: aioredis.Redis, ttl_s: int = 7 * 24 * 3600):
        self.ops = SessionOps(ttl_s, count_apart=isinstance(redis, AsyncRedisCluster))
        self.runner = AsyncRunner(redis)
        self._cache: OrderedDict[str, SessionInfo] = OrderedDict()
        self.cache_size = 8192

    async def create(
        self,
        task_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> SessionInfo:
        """A new open session. Without `session_id` the id is 32 random url-safe bytes."""
        info = SessionInfo(
            session_id=session_id or secrets.token_urlsafe(32),
            task_id=task_id,
            created_at=time.time(),
            metadata=metadata or {},
        )
        if not await self.runner(self.ops.create(info)):
            raise ValueError(f"session {info.session_id!r} already exists")
        self._remember(info)
        return info

    def cached(self, sid: str) -> SessionInfo | None:
        """The session as last read or written by this process, if it is. Its metadata never changes after
        creation and /end through this process drops it, so model calls skip a Redis round trip; expiry and
        an /end made through another process are noticed when the call's record is appended."""
        info = self._cache.get(sid)
        if info is not None:
            self._cache.move_to_end(sid)
        return info

    def _remember(self, info: SessionInfo) -> None:
        self._cache[info.session_id] = info
        self._cache.move_to_end(info.session_id)
        while len(self._cache) > self.cache_size:
            self._cache.popitem(last=False)

    async def get(self, sid: str) -> SessionInfo:
        info = await self.runner(self.ops.get(sid))
        self._remember(info)
        return info

    append_completion = OpMethod(SessionOps.append_completion)
    append_failure = OpMethod(SessionOps.append_failure)
    failures = OpMethod(SessionOps.failures)
    completions = OpMethod(SessionOps.completions)
    completion_count = OpMethod(SessionOps.completion_count)
    set_reward = OpMethod(SessionOps.set_reward)

    async def end(self, sid: str) -> int:
        """Mark ended (idempotent); returns the number of recorded completions."""
        count = await self.runner(self.ops.end(sid))
        self._cache.pop(sid, None)
        return count

    async def delete(self, sid: str) -> None:
        self._cache.pop(sid, None)
        await self.runner(self.ops.delete(sid))
