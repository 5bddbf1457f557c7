"""Gateway sessions in Redis: metadata and state, an append-only completion log, rewards, one TTL."""

from __future__ import annotations

import json
import secrets
import time
from collections import OrderedDict
from typing import Any, Literal

import redis.asyncio as aioredis
from pydantic import BaseModel, Field
from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster

from farm import keys
from farm.builders.records import CompletionRecord

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


# KEYS: session hash, completions list, ids set[, stats hash]  ARGV: record json, ttl, completion id[, field]
# The record's index, or -1 (no session). Appending is idempotent by completion id, so a command retried
# after a connection broke under it never logs a turn twice. With a stats key, counts the call there.
_APPEND = """
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
if redis.call('SADD', KEYS[3], ARGV[3]) == 0 then return redis.call('LLEN', KEYS[2]) - 1 end
local length = redis.call('RPUSH', KEYS[2], ARGV[1])
redis.call('EXPIRE', KEYS[2], ARGV[2])
redis.call('EXPIRE', KEYS[3], ARGV[2])
redis.call('EXPIRE', KEYS[1], ARGV[2])
if KEYS[4] then redis.call('HINCRBY', KEYS[4], ARGV[4], 1) end
return length - 1
"""


# KEYS: session hash, failure list   ARGV: record json, ttl. The failure's index, or -1 (no session).
_APPEND_FAILURE = """
if redis.call('EXISTS', KEYS[1]) == 0 then return -1 end
local length = redis.call('RPUSH', KEYS[2], ARGV[1])
redis.call('EXPIRE', KEYS[2], ARGV[2])
return length - 1
"""


class SessionStore:
    """Keys: `{prefix}:{{sid}}` (hash), `...:completions` (list), `...:ids` (set: the completion ids logged),
    `...:rewards` (hash), `...:failed` (list).

    A session's keys share the hash tag of its id, so its scripts and transactions run on a Redis
    Cluster; the farm-wide call counter is written apart from them.
    """

    def __init__(
        self, redis: aioredis.Redis, ttl_s: int = 7 * 24 * 3600, prefix: str = keys.GATEWAY_SESSIONS
    ):
        self.redis = redis
        self.ttl_s = ttl_s
        self.prefix = prefix
        self._cache: OrderedDict[str, SessionInfo] = OrderedDict()
        self.cache_size = 8192
        self._append = redis.register_script(_APPEND)
        # On a cluster the farm-wide counter lives in another slot than the session's keys.
        self._count_apart = isinstance(redis, AsyncRedisCluster)
        self._append_failure = redis.register_script(_APPEND_FAILURE)

    def _keys(self, sid: str) -> tuple[str, str, str]:
        base = f"{self.prefix}:{{{sid}}}"
        return base, f"{base}:completions", f"{base}:rewards"

    def _failed(self, sid: str) -> str:
        return f"{self.prefix}:{{{sid}}}:failed"

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
        key = self._keys(info.session_id)[0]
        fields = {"info": info.model_dump_json(exclude={"state", "ended_at"}), "state": "open"}
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hsetnx(key, "info", fields["info"])
            pipe.hsetnx(key, "state", "open")
            pipe.expire(key, self.ttl_s)
            created, _, _ = await pipe.execute()
        if not created:
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
        raw = {_text(k): _text(v) for k, v in (await self.redis.hgetall(self._keys(sid)[0])).items()}
        if "info" not in raw:
            raise SessionNotFound(sid)
        info = SessionInfo.model_validate_json(raw["info"])
        info.state = "ended" if raw.get("state") == "ended" else "open"
        if "ended_at" in raw:
            info.ended_at = float(raw["ended_at"])
        self._remember(info)
        return info

    async def append_completion(self, record: CompletionRecord) -> int:
        """Append to the log (one round trip, idempotent by completion id); a call in flight when the session
        ended is still kept. Returns its index."""
        key, completions, _ = self._keys(record.session_id)
        script_keys = [key, completions, f"{key}:ids"]
        args: list[str | int] = [record.model_dump_json(exclude={"reward"}), self.ttl_s, record.completion_id]
        counter = f"gateway_calls:{record.provider}"  # for /metrics
        if not self._count_apart:
            script_keys.append(keys.STATS)
            args.append(counter)
        index = int(await self._append(keys=script_keys, args=args))
        if index < 0:
            raise SessionNotFound(record.session_id)
        if self._count_apart:
            await self.redis.hincrby(keys.STATS, counter, 1)
        return index

    async def append_failure(self, record: CompletionRecord) -> bool:
        """Log a failed call (its `error` set) apart from the completions; False if the session is gone."""
        key = self._keys(record.session_id)[0]
        args: list[str | int] = [record.model_dump_json(exclude={"reward"}), self.ttl_s]
        return int(await self._append_failure(keys=[key, self._failed(record.session_id)], args=args)) >= 0

    async def failures(self, sid: str) -> list[CompletionRecord]:
        """The failed calls in the order they happened."""
        raw = await self.redis.lrange(self._failed(sid), 0, -1)
        return [CompletionRecord.model_validate_json(item) for item in raw]

    async def completions(self, sid: str) -> list[CompletionRecord]:
        """The log in insertion order, with rewards filled in."""
        key, completions, rewards = self._keys(sid)
        async with self.redis.pipeline(transaction=False) as pipe:
            pipe.exists(key)
            pipe.lrange(completions, 0, -1)
            pipe.hgetall(rewards)
            exists, raw, reward_map = await pipe.execute()
        if not exists:
            raise SessionNotFound(sid)
        rewards_by_id = {_text(k): _text(v) for k, v in reward_map.items()}
        out: list[CompletionRecord] = []
        for index, item in enumerate(raw):
            record = CompletionRecord.model_validate_json(item)
            record.index = index
            value = rewards_by_id.get(record.completion_id)
            record.reward = float(value) if value is not None else None
            out.append(record)
        return out

    async def completion_count(self, sid: str) -> int:
        return int(await self.redis.llen(self._keys(sid)[1]))

    async def set_reward(self, sid: str, reward: float, completion_id: str | None = None) -> str:
        """Reward one completion (the last one when no id is given); returns the id rewarded."""
        key, completions, rewards = self._keys(sid)
        if not await self.redis.exists(key):
            raise SessionNotFound(sid)
        if completion_id is None:
            last = await self.redis.lindex(completions, -1)
            if last is None:
                raise NoCompletion("the session has no completion to reward yet")
            completion_id = CompletionRecord.model_validate_json(last).completion_id
        else:
            known = [
                CompletionRecord.model_validate_json(x).completion_id
                for x in await self.redis.lrange(completions, 0, -1)
            ]
            if completion_id not in known:
                raise NoCompletion(f"no completion {completion_id!r} in this session")
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(rewards, completion_id, json.dumps(float(reward)))
            pipe.expire(rewards, self.ttl_s)
            await pipe.execute()
        return completion_id

    async def end(self, sid: str) -> int:
        """Mark ended (idempotent); returns the number of recorded completions."""
        key, completions, _ = self._keys(sid)
        if not await self.redis.exists(key):
            raise SessionNotFound(sid)
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.hset(key, "state", "ended")
            pipe.hsetnx(key, "ended_at", str(time.time()))
            pipe.llen(completions)
            _, _, count = await pipe.execute()
        self._cache.pop(sid, None)
        return int(count)

    async def delete(self, sid: str) -> None:
        self._cache.pop(sid, None)
        await self.redis.delete(*self._keys(sid), self._failed(sid), f"{self._keys(sid)[0]}:ids")
