"""GET /metrics: Prometheus text built from the farm's shared state in Redis, so every API replica
reports the same numbers whichever worker did the work."""

from __future__ import annotations

from fastapi import APIRouter, Depends, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from farm import keys
from farm.api.queues import queue_depths, ready_by_node
from farm.api.responses import errors
from farm.api.security import require_token
from farm.api.state import FarmState, farm_state
from farm.models.results import STAGES, TERMINAL_STATES
from farm.workers import live_workers_async

router = APIRouter(dependencies=[Depends(require_token)], responses=errors(401))


class _Snapshot(Collector):
    def __init__(self, families: list) -> None:
        self.families = families

    def collect(self):
        yield from self.families


@router.get("/metrics", response_class=Response)
async def metrics(farm: FarmState = Depends(farm_state)) -> Response:
    stats = {k.decode(): float(v) for k, v in (await farm.redis.hgetall(keys.STATS)).items()}
    by_state = await farm.store.counts_by_state()
    depths = await queue_depths(farm.redis, ["init", "run", "eval"])
    backends = await farm.pool.list()
    workers = await live_workers_async(farm.redis)
    ready = await ready_by_node(farm.redis, {w["node"] for w in workers})

    finished = CounterMetricFamily(
        "farm_jobs_finished", "Jobs that reached a terminal state", labels=["state"]
    )
    for state in sorted(s.value for s in TERMINAL_STATES):
        finished.add_metric([state], stats.get(f"jobs_total:{state}", 0.0))
    active = GaugeMetricFamily("farm_jobs_active", "Jobs by non-terminal state", labels=["state"])
    for state in ("queued", *STAGES):
        active.add_metric([state], float(by_state.get(state, 0)))
    stage_sum = CounterMetricFamily("farm_stage_seconds", "Seconds spent inside stages", labels=["stage"])
    stage_count = CounterMetricFamily(
        "farm_stage_runs",
        "Stage executions that ended (handed off to the next stage, or ended the job)",
        labels=["stage"],
    )
    for stage in STAGES:
        stage_sum.add_metric([stage], stats.get(f"stage_seconds_sum:{stage}", 0.0))
        stage_count.add_metric([stage], stats.get(f"stage_count:{stage}", 0.0))
    queue = GaugeMetricFamily("farm_queue_depth", "Messages waiting per stage queue", labels=["queue"])
    for name, depth in depths.items():
        queue.add_metric([name], float(depth))
    assigned = GaugeMetricFamily("farm_backend_assigned", "Jobs pinned per backend", labels=["address"])
    inflight = GaugeMetricFamily("farm_backend_in_flight", "LLM calls in flight", labels=["address"])
    healthy = GaugeMetricFamily(
        "farm_backend_healthy", "1 when the backend is in rotation", labels=["address"]
    )
    for b in backends:
        assigned.add_metric([b.address], float(b.assigned))
        inflight.add_metric([b.address], float(b.in_flight))
        healthy.add_metric([b.address], 1.0 if b.healthy else 0.0)

    ready_gauge = GaugeMetricFamily(
        "farm_ready_slots",
        "READY buffer slots held per node (sandboxes preparing or awaiting run)",
        labels=["node"],
    )
    for node, held in ready.items():
        ready_gauge.add_metric([node], float(held))
    live = GaugeMetricFamily("farm_workers_live", "Celery workers with a live heartbeat", labels=["node"])
    for node in sorted({w.get("node", "") for w in workers}):
        live.add_metric([node], float(sum(1 for w in workers if w.get("node", "") == node)))

    gateway = CounterMetricFamily(
        "farm_gateway_calls", "Model calls answered and recorded by the gateway", labels=["provider"]
    )
    prefix = "gateway_calls:"
    for name in sorted(k for k in stats if k.startswith(prefix)):
        gateway.add_metric([name.removeprefix(prefix)], stats[name])

    registry = CollectorRegistry()
    families = [finished, active, stage_sum, stage_count, queue, assigned, inflight, healthy]
    families += [ready_gauge, live, gateway]
    registry.register(_Snapshot(families))
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
