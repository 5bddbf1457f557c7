"""Every Redis command the farm sends goes through the operations of the concern that owns the keys: the job
store (farm/jobs/ops.py, with the task API's records and callback deliveries beside it), the backend pool,
the worker registry, the gateway's sessions. This scans the source (AST) for a Redis call anywhere else: a
raw client reached through `.r` / `._r`, a pipeline, a script registered on the side, or a Redis command
method called on a key of farm/keys.py. Handlers and sandboxes know no Redis at all."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

OWNERS = {
    "farm/redis_ops.py": "runs every operation on a sync or asyncio client",
    "farm/jobs/ops.py": "the job store's operations",
    "farm/jobs/callback_records.py": "callback deliveries' operations",
    "farm/jobs/task_records.py": "the task API's records",
    "farm/jobs/offpolicy_records.py": "the off-policy lag trainers report, and their stale-sample counts",
    "farm/jobs/index.py": "the viewer's reads of the job index and rows",
    "farm/pool.py": "the backend pool's operations",
    "farm/workers.py": "the worker registry",
    "farm/gateway/sessions.py": "the gateway's session records",
    "farm/api/waiter.py": "the subscriber of the job-end channel (pub/sub, no key)",
    "farm/demo.py": "`farm demo`'s claim on the private Redis it starts",
    "farm/redis_clients.py": "opens the clients",
    "farm/embedded_redis.py": "starts a private redis-server",
}
COMMANDS = {
    "hget", "hgetall", "hmget", "hset", "hsetnx", "hdel", "hexists", "hincrby", "hincrbyfloat", "hlen",
    "zadd", "zrem", "zcard", "zscore", "zmscore", "zrange", "zrangebyscore", "zrevrange",
    "zrevrangebyscore", "zremrangebyscore", "zincrby", "lpush", "rpush", "lpop", "rpop", "brpop",
    "lrange", "llen", "lindex", "lrem", "ltrim", "sadd", "srem", "smembers", "scard", "sismember",
    "expire", "pexpire", "persist", "ttl", "pttl", "incr", "incrby", "decr", "setex", "mget", "mset",
    "publish", "flushdb",
}  # fmt: skip
ALWAYS = {"register_script", "evalsha", "pipeline", "pubsub"}
"""Never anything but Redis in this code base."""
GENERIC = {"get", "set", "delete", "exists", "unlink"}
"""Redis commands whose names other objects share (dict.get, Path.exists): flagged when given a key."""


def _names_a_key(node: ast.Call) -> bool:
    if any(k.arg in ("nx", "xx", "ex", "px") for k in node.keywords):
        return True
    return any(isinstance(sub, ast.Name) and sub.id == "keys" for arg in node.args for sub in ast.walk(arg))


def _is_self(node: ast.expr) -> bool:
    return isinstance(node, ast.Name) and node.id == "self"


def redis_calls(source: str) -> list[str]:
    """Each Redis call or raw-client access in `source`, as 'line: what'."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Attribute) and node.attr in ("r", "_r") and not _is_self(node.value):
            found.append(f"{node.lineno}: .{node.attr} (a store's raw client)")
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        name = node.func.attr
        if name in ALWAYS or name in COMMANDS or (name in GENERIC and _names_a_key(node)):
            found.append(f"{node.lineno}: {name}()")
    return found


def _modules(*packages: str) -> list[Path]:
    return [
        p for package in packages for p in sorted((ROOT / package).rglob("*.py")) if "repos" not in p.parts
    ]


def test_no_redis_call_outside_the_owners_of_the_keys() -> None:
    doors = {
        rel: calls
        for path in _modules("farm", "tasks")
        if (rel := str(path.relative_to(ROOT))) not in OWNERS
        if (calls := redis_calls(path.read_text()))
    }
    assert doors == {}


def test_handlers_and_sandboxes_know_no_redis() -> None:
    importing = [
        str(path.relative_to(ROOT))
        for path in _modules("handlers", "containers")
        for node in ast.walk(ast.parse(path.read_text()))
        if (isinstance(node, ast.Import) and any(a.name.split(".")[0] == "redis" for a in node.names))
        or (isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "redis")
    ]
    assert importing == []


def test_the_scan_finds_the_side_doors_it_replaced() -> None:
    """What tasks/reaper.py, tasks/monitor.py and farm/api/cancel.py did before their operations existed."""
    before = {
        "store.r.set(keys.REAPER, host, nx=True, px=3000)": ".r",
        "job_store().r.delete(keys.draining(hostname))": ".r",
        "pipe = farm.redis.pipeline(transaction=False)": "pipeline()",
        "await farm.redis.hget(keys.task(task_id), 'session_ids')": "hget()",
        "claim = farm.redis.register_script(CLAIM_TASK)": "register_script()",
        "await farm.redis.set(keys.ACCEPTING, '0')": "set()",
    }
    for source, what in before.items():
        assert any(what in call for call in redis_calls(source)), source
    assert redis_calls("settings.get('x'); path.exists(); self._r = client") == []


def test_the_owners_exist() -> None:
    assert all((ROOT / rel).is_file() for rel in OWNERS)
