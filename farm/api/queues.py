"""Queue depths read straight from the Redis broker (kombu keeps one list per queue and priority)."""

from __future__ import annotations

import redis.asyncio as aioredis

from farm import keys

# kombu's Redis transport stores priorities 3, 6 and 9 in lists named queue + "\x06\x16" + priority.
_PRIORITY_SUFFIXES = ("", "\x06\x163", "\x06\x166", "\x06\x169")


async def queue_depths(client: aioredis.Redis, queues: list[str]) -> dict[str, int]:
    pipe = client.pipeline(transaction=False)
    for queue in queues:
        for suffix in _PRIORITY_SUFFIXES:
            pipe.llen(queue + suffix)
    counts = await pipe.execute()
    step = len(_PRIORITY_SUFFIXES)
    return {queue: sum(counts[i * step : (i + 1) * step]) for i, queue in enumerate(queues)}


async def ready_by_node(client: aioredis.Redis, nodes: set[str]) -> dict[str, int]:
    """READY slots held on each of `nodes` (the nodes of live workers): sandboxes being prepared or
    awaiting run."""
    ordered = sorted(nodes)
    async with client.pipeline(transaction=False) as pipe:
        for node in ordered:
            pipe.zcard(keys.ready(node))
        counts = await pipe.execute()
    return {node: int(n) for node, n in zip(ordered, counts, strict=True)}
