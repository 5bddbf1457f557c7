"""GET /metrics: Prometheus text built from the farm's shared state in Redis, so every API replica
reports the same numbers whichever worker did the work."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Iterator
from typing import Any

from fastapi import APIRouter, Depends, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from farm import keys
from farm.api.parse_metrics import parse_outcome_families
from farm.api.state import FarmState, farm_state
from farm.api.training_metrics import offpolicy_reports, training_families
from farm.models.backends import BackendInfo
from farm.models.results import STAGES, TERMINAL_STATES
from farm.web.responses import errors
from farm.web.security import require_token
from farm.workers import live_workers_async

GATEWAY_CALLS = "gateway_calls:"
Family = CounterMetricFamily | GaugeMetricFamily
Samples = Iterable[tuple[str, float]]
router = APIRouter(dependencies=[Depends(require_token)], responses=errors(401))


class _Snapshot(Collector):
    def __init__(self, families: list[Family]) -> None:
        self.families = families

    def collect(self) -> Iterator[Family]:
        yield from self.families


def _family(kind: type[Family], name: str, doc: str, label: str, samples: Samples) -> Family:
    family = kind(name, doc, labels=[label])
    for value, sample in samples:
        family.add_metric([value], float(sample))
    return family


def _job_families(stats: dict[str, float], by_state: dict[str, int]) -> list[Family]:
    terminal = sorted(s.value for s in TERMINAL_STATES)
    return [
        _family(CounterMetricFamily, "farm_jobs_finished", "Jobs that reached a terminal state", "state",
                ((s, stats.get(f"jobs_total:{s}", 0.0)) for s in terminal)),
        _family(GaugeMetricFamily, "farm_jobs_active", "Jobs by non-terminal state", "state",
                ((s, by_state.get(s, 0)) for s in ("queued", *STAGES))),
        _family(CounterMetricFamily, "farm_stage_seconds", "Seconds spent inside stages", "stage",
                ((s, stats.get(f"stage_seconds_sum:{s}", 0.0)) for s in STAGES)),
        _family(CounterMetricFamily, "farm_stage_runs",
                "Stage executions that ended (handed off, counted as the next one starts, or ended the job)",
                "stage",
                ((s, stats.get(f"stage_count:{s}", 0.0)) for s in STAGES)),
        _family(CounterMetricFamily, "farm_gateway_calls", "Model calls answered and recorded by the gateway",
                "provider", ((k.removeprefix(GATEWAY_CALLS), v) for k, v in sorted(stats.items())
                             if k.startswith(GATEWAY_CALLS))),
        _family(CounterMetricFamily, "farm_tool_call_misses",
                "Assistant turns with text that looked like a tool call the selected parser could not read",
                "parser", _prefixed(stats, keys.TOOL_CALL_MISSES)),
        _family(CounterMetricFamily, "farm_tool_call_flagged",
                "Episodes flagged because every turn was a tool-call miss", "parser",
                _prefixed(stats, keys.TOOL_CALL_FLAGGED)),
    ]  # fmt: skip


def _prefixed(stats: dict[str, float], prefix: str) -> list[tuple[str, float]]:
    return [(k.removeprefix(prefix), v) for k, v in sorted(stats.items()) if k.startswith(prefix)]


def _backend_families(backends: list[BackendInfo]) -> list[Family]:
    return [
        _family(GaugeMetricFamily, "farm_backend_assigned", "Jobs pinned per backend", "address",
                ((b.address, b.assigned) for b in backends)),
        _family(GaugeMetricFamily, "farm_backend_in_flight", "LLM calls in flight", "address",
                ((b.address, b.in_flight) for b in backends)),
        _family(GaugeMetricFamily, "farm_backend_healthy", "1 when the backend is in rotation", "address",
                ((b.address, 1.0 if b.healthy else 0.0) for b in backends)),
    ]  # fmt: skip


def _node_families(workers: list[dict[str, Any]], ready: dict[str, int]) -> list[Family]:
    per_node = Counter(w.get("node", "") for w in workers)
    sandboxes: dict[str, int] = {}  # each worker of a node reports the node's count
    for w in workers:
        if "sandboxes" in w:
            node = w.get("node", "")
            sandboxes[node] = max(sandboxes.get(node, 0), int(w["sandboxes"]))
    return [
        _family(GaugeMetricFamily, "farm_ready_slots",
                "READY buffer slots held per node (sandboxes preparing or awaiting run)", "node",
                ready.items()),
        _family(GaugeMetricFamily, "farm_workers_live", "Celery workers with a live heartbeat", "node",
                sorted(per_node.items())),
        _family(GaugeMetricFamily, "farm_sandboxes",
                "Sandboxes alive per node (reported with the workers' heartbeats)", "node",
                sorted(sandboxes.items())),
        *_warm_families(workers),
    ]  # fmt: skip


def _warm_families(workers: list[dict[str, Any]]) -> list[Family]:
    """The init workers' warm pools (tasks/warm.py), summed per node."""
    totals: dict[str, Counter[str]] = {}
    for w in workers:
        pool = w.get("warm_pool")
        if isinstance(pool, dict):
            totals.setdefault(w.get("node", ""), Counter()).update(pool)
    nodes = sorted(totals)
    return [
        _family(kind, name, doc, "node", ((n, totals[n][count]) for n in nodes))
        for kind, name, doc, count in _WARM_METRICS
    ]


_WARM_METRICS: list[tuple[type[Family], str, str, str]] = [
    (GaugeMetricFamily, "farm_warm_sandboxes",
     "Pooled sandboxes ready to be claimed per node (warm pool)", "ready"),
    (GaugeMetricFamily, "farm_warm_starting",
     "Sandboxes being started for the warm pool per node", "starting"),
    (CounterMetricFamily, "farm_warm_claims", "Sandbox starts served from the warm pool per node", "hits"),
    (CounterMetricFamily, "farm_warm_misses",
     "Sandbox starts the warm pool could not serve (started cold) per node", "misses"),
    (CounterMetricFamily, "farm_warm_expired",
     "Pooled sandboxes stopped unclaimed after the idle bound per node", "expired"),
]  # fmt: skip
"""(kind, name, help, the pool's count it reports) of each warm-pool family."""


@router.get("/metrics", response_class=Response)
async def metrics(request: Request, farm: FarmState = Depends(farm_state)) -> Response:
    stats = await farm.store.stats()
    gateway = getattr(request.app.state, "gateway", None)
    depths = await farm.store.queue_depths(["init", "run", "eval"])
    workers = await live_workers_async(farm.redis)
    ready = await farm.store.ready_by_node({w["node"] for w in workers})
    families = [
        # training-side gauges (farm/api/training_metrics.py): infra failures, off-policy lag, stale samples,
        # the gateway's record writer; the tool-call unparsed rate comes with the parse-outcome families
        *training_families(stats, await offpolicy_reports(farm.redis), getattr(gateway, "writer", None)),
        *_job_families(stats, await farm.store.counts_by_state()),
        _family(GaugeMetricFamily, "farm_queue_depth", "Messages waiting per stage queue", "queue",
                depths.items()),
        *_backend_families(await farm.pool.list()),
        *_node_families(workers, ready),
        *parse_outcome_families(stats),
    ]  # fmt: skip
    registry = CollectorRegistry()
    registry.register(_Snapshot(families))
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
