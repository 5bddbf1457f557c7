"""The LLM backend pool in Redis: register, clear, list, and sticky least-assigned selection.

Selection runs as one Lua script, so concurrent workers and gateway processes never race on counts.
A key (job id or gateway session id) is pinned to one backend for its whole life (prefix-cache reuse).
Each registration gets a generation number: after a checkpoint swap (clear + re-add, possibly of the
same address), pins from before the swap are recognised as stale and re-assigned and counted afresh,
so jobs already in flight keep running against the new pool. A weight publish is not a swap: the
trainer re-adds the same address with its new `policy_version` (or sets it), the registration keeps its
generation, and each model call records the version it was served under.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any, Generic

import redis
import redis.asyncio as aioredis
from redis.client import Pipeline

from farm import keys
from farm.models.backends import BackendInfo
from farm.redis_ops import AsyncRunner, Batch, Client, Command, Op, OpMethod, Runner, RunnerT, Script
from farm.text import as_text as _decode

STICKY_TTL_S = 7 * 24 * 3600

# KEYS: backends, assigned, unhealthy, sticky(key)   ARGV: sticky ttl, minimum policy version (-1: any)
# A backend registered with no version, or an older one than ARGV[2], is not used (nor kept pinned).
_ACQUIRE = """
local min_version = tonumber(ARGV[2])
local function recent(decoded)
  if min_version < 0 then return true end
  local version = decoded['policy_version']
  return type(version) == 'number' and version >= min_version
end
local pinned = redis.call('GET', KEYS[4])
if pinned then
  local sep = string.find(pinned, '|', 1, true)
  local addr = string.sub(pinned, 1, sep - 1)
  local gen = string.sub(pinned, sep + 1)
  local meta = redis.call('HGET', KEYS[1], addr)
  if meta and tostring(cjson.decode(meta)['gen']) == gen then
    if redis.call('SISMEMBER', KEYS[3], addr) == 0 and recent(cjson.decode(meta)) then
      return {addr, meta}
    end
    local left = tonumber(redis.call('ZINCRBY', KEYS[2], -1, addr))
    if left < 0 then redis.call('ZADD', KEYS[2], 0, addr) end
  end
end
local best = nil
local best_score = nil
local best_order = nil
local best_gen = nil
local best_meta = nil
local entries = redis.call('HGETALL', KEYS[1])
for i = 1, #entries, 2 do
  local addr = entries[i]
  local meta = cjson.decode(entries[i + 1])
  if redis.call('SISMEMBER', KEYS[3], addr) == 0 and recent(meta) then
    local score = (tonumber(redis.call('ZSCORE', KEYS[2], addr)) or 0) / meta['weight']
    if best == nil or score < best_score or (score == best_score and meta['order'] < best_order) then
      best, best_score, best_order, best_gen = addr, score, meta['order'], meta['gen']
      best_meta = entries[i + 1]
    end
  end
end
if best == nil then
  return false
end
redis.call('ZINCRBY', KEYS[2], 1, best)
redis.call('SET', KEYS[4], best .. '|' .. tostring(best_gen), 'EX', ARGV[1])
return {best, best_meta}
"""

# KEYS: backends, assigned, sticky(key)
_RELEASE = """
local pinned = redis.call('GET', KEYS[3])
if not pinned then return 0 end
redis.call('DEL', KEYS[3])
local sep = string.find(pinned, '|', 1, true)
local addr = string.sub(pinned, 1, sep - 1)
local gen = string.sub(pinned, sep + 1)
local meta = redis.call('HGET', KEYS[1], addr)
if meta and tostring(cjson.decode(meta)['gen']) == gen then
  local left = tonumber(redis.call('ZINCRBY', KEYS[2], -1, addr))
  if left < 0 then redis.call('ZADD', KEYS[2], 0, addr) end
  return 1
end
return 0
"""

# KEYS: backends, seq, assigned, unhealthy, errors   ARGV: address, json meta without gen/order
_ADD = """
local existing = redis.call('HGET', KEYS[1], ARGV[1])
local meta = cjson.decode(ARGV[2])
if existing then
  local old = cjson.decode(existing)
  meta['gen'] = old['gen']
  meta['order'] = old['order']
  if meta['policy_version'] == nil then meta['policy_version'] = old['policy_version'] end
  if meta['tool_call_parser'] == nil then meta['tool_call_parser'] = old['tool_call_parser'] end
else
  local gen = redis.call('INCR', KEYS[2])
  meta['gen'] = gen
  meta['order'] = gen
  redis.call('ZADD', KEYS[3], 0, ARGV[1])
end
redis.call('HSET', KEYS[1], ARGV[1], cjson.encode(meta))
redis.call('SREM', KEYS[4], ARGV[1])
redis.call('HDEL', KEYS[5], ARGV[1])
return 1
"""

# KEYS: backends   ARGV: address, 'policy_version' (served) or 'publishing' (being published), version
# The version a backend serves ends its publishing.
_SET_VERSION = """
local raw = redis.call('HGET', KEYS[1], ARGV[1])
if not raw then return 0 end
local meta = cjson.decode(raw)
meta[ARGV[2]] = tonumber(ARGV[3])
if ARGV[2] == 'policy_version' then meta['publishing'] = nil end
redis.call('HSET', KEYS[1], ARGV[1], cjson.encode(meta))
return 1
"""

# KEYS: backends, inflight   ARGV: address, delta
_INFLIGHT = """
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end
local n = tonumber(redis.call('HINCRBY', KEYS[2], ARGV[1], ARGV[2]))
if n < 0 then redis.call('HSET', KEYS[2], ARGV[1], 0) end
return n
"""


def normalise_address(address: str) -> str:
    return address.strip().rstrip("/")


def _meta(
    weight: int, kind: str, policy_version: int | None = None, tool_call_parser: str | None = None
) -> str:
    meta: dict[str, Any] = {"weight": weight, "kind": kind, "added_at": time.time()}
    if policy_version is not None:
        meta["policy_version"] = policy_version
    if tool_call_parser:
        meta["tool_call_parser"] = tool_call_parser
    return json.dumps(meta)


def _version(meta: dict[str, Any]) -> int | None:
    value = meta.get("policy_version")
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _publishing(meta: dict[str, Any]) -> int | None:
    value = meta.get("publishing")
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _infos(
    entries: dict[str, str],
    assigned: dict[str, float],
    inflight: dict[str, str],
    unhealthy: set[str],
    errors: dict[str, str] | None = None,
) -> list[BackendInfo]:
    rows: list[tuple[int, BackendInfo]] = []
    for address, raw in entries.items():
        meta: dict[str, Any] = json.loads(raw)
        info = BackendInfo(
            address=address,
            kind=meta.get("kind", "vllm"),
            weight=int(meta.get("weight", 1)),
            assigned=int(assigned.get(address, 0)),
            in_flight=max(0, int(inflight.get(address, 0))),
            healthy=address not in unhealthy,
            error=(errors or {}).get(address) if address in unhealthy else None,
            policy_version=_version(meta),
            publishing=_publishing(meta),
            tool_call_parser=meta.get("tool_call_parser"),
        )
        rows.append((int(meta.get("order", 0)), info))
    return [info for _, info in sorted(rows, key=lambda r: r[0])]


class PoolOps:
    """Each pool operation written once (farm/redis_ops.py); the pool holds no state of its own."""

    def add(
        self,
        address: str,
        weight: int = 1,
        kind: str = "vllm",
        policy_version: int | None = None,
        tool_call_parser: str | None = None,
    ) -> Op[list[BackendInfo]]:
        """Registers a backend; an address already registered keeps its generation (its jobs stay
        pinned), so re-adding it with a new `policy_version` is a weight publish, not a swap."""
        keys_ = [keys.BACKENDS, keys.BACKENDS_SEQ, keys.BACKENDS_ASSIGNED, keys.BACKENDS_UNHEALTHY]
        keys_.append(keys.BACKENDS_ERRORS)
        meta = _meta(weight, kind, policy_version, tool_call_parser)
        yield Script(_ADD, keys_, [normalise_address(address), meta])
        return (yield from self.list())

    def set_policy_version(self, address: str, version: int) -> Op[bool]:
        """The version of the weights a registered backend now serves, set in place (no clear, no
        re-pin, health untouched). False when the address is not registered."""
        return (yield from self._set_version(address, "policy_version", version))

    def set_publishing(self, address: str, version: int) -> Op[bool]:
        """Marks a registered backend as being updated to `version` (POST /publish_weights) until
        set_policy_version labels it or it is removed. False when the address is not registered."""
        return (yield from self._set_version(address, "publishing", version))

    def _set_version(self, address: str, field: str, version: int) -> Op[bool]:
        args = [normalise_address(address), field, version]
        return bool((yield Script(_SET_VERSION, [keys.BACKENDS], args)))

    def registration(self, address: str) -> Op[tuple[int | None, int | None] | None]:
        """One HGET: the (policy_version, publishing) a backend is registered with now; None: not
        registered. A model call reads it again when it ends, to tell a turn that spanned a publish."""
        raw = yield Command(lambda r: r.hget(keys.BACKENDS, normalise_address(address)))
        if raw is None:
            return None
        meta = json.loads(_decode(raw))
        return _version(meta), _publishing(meta)

    def remove(self, address: str) -> Op[bool]:
        """Takes one backend out of the pool; jobs pinned to it re-pick at their next call (as after a
        clear). False when it was not registered."""
        address = normalise_address(address)

        def queue(pipe: Pipeline) -> None:
            pipe.hdel(keys.BACKENDS, address)
            pipe.zrem(keys.BACKENDS_ASSIGNED, address)
            pipe.hdel(keys.BACKENDS_INFLIGHT, address)
            pipe.srem(keys.BACKENDS_UNHEALTHY, address)
            pipe.hdel(keys.BACKENDS_ERRORS, address)

        removed, *_ = yield Batch(queue, transaction=True)
        return bool(removed)

    def clear(self) -> Op[list[BackendInfo]]:
        every = (
            keys.BACKENDS,
            keys.BACKENDS_ASSIGNED,
            keys.BACKENDS_INFLIGHT,
            keys.BACKENDS_UNHEALTHY,
            keys.BACKENDS_ERRORS,
        )
        yield Command(lambda r: r.delete(*every))
        return []

    def list(self) -> Op[list[BackendInfo]]:
        entries, assigned, inflight, unhealthy, errors = yield Batch(_queue_list)
        return _infos(_text(entries), _scores(assigned), _text(inflight), _members(unhealthy), _text(errors))

    def get(self, address: str) -> Op[BackendInfo | None]:
        listed = yield from self.list()
        return next((b for b in listed if b.address == address), None)

    def acquire(self, key: str, min_policy_version: int | None = None) -> Op[BackendInfo | None]:
        """The backend `key` is pinned to, pinning it to the least-assigned healthy one if needed. With
        `min_policy_version`, only a backend registered as serving that version or a newer one is used
        (None when there is none yet: the caller waits for a publish as for an empty pool)."""
        keys_ = [keys.BACKENDS, keys.BACKENDS_ASSIGNED, keys.BACKENDS_UNHEALTHY, keys.sticky(key)]
        floor = -1 if min_policy_version is None else min_policy_version
        return _pinned((yield Script(_ACQUIRE, keys_, [STICKY_TTL_S, floor])))

    def release(self, key: str) -> Op[None]:
        yield Script(_RELEASE, [keys.BACKENDS, keys.BACKENDS_ASSIGNED, keys.sticky(key)])

    def mark_unhealthy(self, address: str, reason: str | None = None) -> Op[None]:
        """Out of selection until the prober sees it answer again; `reason` is listed beside it."""
        if (yield Command(lambda r: r.hexists(keys.BACKENDS, address))):
            yield Command(lambda r: r.sadd(keys.BACKENDS_UNHEALTHY, address))
            if reason:
                yield Command(lambda r: r.hset(keys.BACKENDS_ERRORS, address, reason[:500]))

    def any_unhealthy(self) -> Op[bool]:
        """One SCARD: whether a backend is marked unhealthy (the prober's idle check)."""
        return bool((yield Command(lambda r: r.scard(keys.BACKENDS_UNHEALTHY))))

    def mark_healthy(self, address: str) -> Op[None]:
        yield Command(lambda r: r.srem(keys.BACKENDS_UNHEALTHY, address))
        yield Command(lambda r: r.hdel(keys.BACKENDS_ERRORS, address))

    def call_started(self, address: str) -> Op[None]:
        yield Script(_INFLIGHT, [keys.BACKENDS, keys.BACKENDS_INFLIGHT], [address, 1])

    def call_finished(self, address: str) -> Op[None]:
        yield Script(_INFLIGHT, [keys.BACKENDS, keys.BACKENDS_INFLIGHT], [address, -1])

    def count_stats(self, increments: dict[str, int]) -> Op[None]:
        """Adds to the farm-wide counters /metrics reads (the agent loop's tool-call misses, by parser):
        the pool is the one Redis door an agent loop holds."""

        def queue(pipe: Pipeline) -> None:
            for name, amount in increments.items():
                pipe.hincrby(keys.STATS, name, amount)

        yield Batch(queue)


def _queue_list(pipe: Pipeline) -> None:
    pipe.hgetall(keys.BACKENDS)
    pipe.zrange(keys.BACKENDS_ASSIGNED, 0, -1, withscores=True)
    pipe.hgetall(keys.BACKENDS_INFLIGHT)
    pipe.smembers(keys.BACKENDS_UNHEALTHY)
    pipe.hgetall(keys.BACKENDS_ERRORS)


class _Pool(Generic[Client, RunnerT]):
    """The pool's operations, which the sync and the async client both run."""

    runner_type: Callable[[Client], RunnerT]

    def __init__(self, client: Client) -> None:
        self._r: Client = client
        """The raw client: private; every command goes through an operation."""
        self.ops = PoolOps()
        self.runner: RunnerT = self.runner_type(client)

    add = OpMethod(PoolOps.add)
    set_policy_version = OpMethod(PoolOps.set_policy_version)
    set_publishing = OpMethod(PoolOps.set_publishing)
    registration = OpMethod(PoolOps.registration)
    remove = OpMethod(PoolOps.remove)
    clear = OpMethod(PoolOps.clear)
    any_unhealthy = OpMethod(PoolOps.any_unhealthy)
    list = OpMethod(PoolOps.list)
    get = OpMethod(PoolOps.get)
    acquire = OpMethod(PoolOps.acquire)
    release = OpMethod(PoolOps.release)
    mark_unhealthy = OpMethod(PoolOps.mark_unhealthy)
    mark_healthy = OpMethod(PoolOps.mark_healthy)
    call_started = OpMethod(PoolOps.call_started)
    call_finished = OpMethod(PoolOps.call_finished)
    count_stats = OpMethod(PoolOps.count_stats)


class BackendPool(_Pool[redis.Redis, Runner]):
    """Synchronous pool client, used by Celery workers."""

    runner_type = Runner


class AsyncBackendPool(_Pool[aioredis.Redis, AsyncRunner]):
    """The same pool for asyncio code (the API and the gateway)."""

    runner_type = AsyncRunner


def _pinned(reply: list[Any] | None) -> BackendInfo | None:
    """The acquire script's answer: the address and its registration, in one round trip."""
    if not reply:
        return None
    meta = json.loads(_decode(reply[1]))
    kind, weight = meta.get("kind", "vllm"), int(meta.get("weight", 1))
    parser = meta.get("tool_call_parser")
    return BackendInfo(
        address=_decode(reply[0]),
        kind=kind,
        weight=weight,
        policy_version=_version(meta),
        publishing=_publishing(meta),
        tool_call_parser=parser,
    )


def _text(mapping: dict[Any, Any]) -> dict[str, str]:
    return {_decode(k): _decode(v) for k, v in mapping.items()}


def _scores(pairs: list[tuple[Any, float]]) -> dict[str, float]:
    return {_decode(k): v for k, v in pairs}


def _members(values: set[Any]) -> set[str]:
    return {_decode(v) for v in values}
