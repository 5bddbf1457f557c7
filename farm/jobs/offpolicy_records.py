"""The off-policy lag trainers' consumers report (POST /metrics/offpolicy): each run's last report, and the
farm-wide counts of stale samples they withheld or discarded. Operations written once (farm/redis_ops.py)."""

from __future__ import annotations

import json
from typing import Any

import redis.asyncio as aioredis
from redis.client import Pipeline

from farm import keys
from farm.redis_ops import AsyncRunner, Batch, Command, Op, OpMethod
from farm.text import as_text


class OffPolicyOps:
    def report(self, run_id: str, entry: dict[str, Any], counts: dict[str, int]) -> Op[None]:
        """Keeps `entry` as the run's last report and adds `counts` to the stale-sample counters."""

        def queue(pipe: Pipeline) -> None:
            pipe.hset(keys.OFFPOLICY, run_id, json.dumps(entry))
            for action, count in counts.items():
                if count:
                    pipe.hincrby(keys.STATS, f"{keys.STALE_SAMPLES}{action}", count)

        yield Batch(queue)

    def reports(self) -> Op[dict[str, dict[str, Any]]]:
        """Run id -> its last report."""
        raw = yield Command(lambda r: r.hgetall(keys.OFFPOLICY))
        return {as_text(run): json.loads(value) for run, value in raw.items()}

    def forget(self, run_ids: list[str]) -> Op[None]:
        if run_ids:
            yield Command(lambda r: r.hdel(keys.OFFPOLICY, *run_ids))


class AsyncOffPolicyStore:
    def __init__(self, client: aioredis.Redis) -> None:
        self.ops = OffPolicyOps()
        self.runner = AsyncRunner(client)

    report = OpMethod(OffPolicyOps.report)
    reports = OpMethod(OffPolicyOps.reports)
    forget = OpMethod(OffPolicyOps.forget)
