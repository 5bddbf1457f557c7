"""The farm's status snapshot: whether it takes work, queue depths, READY slots per node, jobs per
state, live workers, backends. GET /status answers it and the viewer's live page extends it; both read
it from here, below either of them."""

from __future__ import annotations

from typing import Any

from farm.settings import get_settings
from farm.web.shared_state import SharedState
from farm.workers import live_workers_async

STAGE_QUEUES = ("init", "run", "eval")
WORKER_FIELDS = ("hostname", "node", "queues", "pid", "concurrency", "seen_at", "warm_pool")


async def farm_status(farm: SharedState) -> dict[str, Any]:
    workers = await live_workers_async(farm.redis)
    node_queues = sorted({q for w in workers for q in w.get("queues", []) if q.startswith("run.")})
    return {
        "accepting": await farm.accepting(),
        "queues": await farm.store.queue_depths([*STAGE_QUEUES, *node_queues]),
        "ready": await farm.store.ready_by_node({w["node"] for w in workers}),
        "jobs": await farm.store.counts_by_state(),
        "active_jobs": await farm.store.active_count(),
        "workers": [
            {k: w.get(k) for k in WORKER_FIELDS} for w in sorted(workers, key=lambda w: w.get("hostname", ""))
        ],
        "backends": [b.model_dump() for b in await farm.pool.list()],
        # a job's metadata.tool_call_parser, else its backend's, else this, else the tokenizer's guess
        # ("auto"); each trace's metadata says which one ran (tool_call_parser, tool_call_parser_from)
        "tool_call_parser": get_settings().tool_call_parser or "auto",
    }
