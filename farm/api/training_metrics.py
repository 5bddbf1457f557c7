"""The /metrics families a training team watches: infrastructure-failure counts (the rate is theirs over
`farm_jobs_finished`), the off-policy lag the trainers' consumers report at batch assembly (in flight and
in queue), the stale samples they withheld or discarded, and this API process's completion-record writer
(dropped records, back-pressure). POST /metrics/offpolicy is where a consumer reports one batch's lag."""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import redis.asyncio as aioredis
from fastapi import APIRouter, Depends
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from farm import keys
from farm.api.state import FarmState, farm_state
from farm.jobs.offpolicy_records import AsyncOffPolicyStore
from farm.models.offpolicy import OffPolicyReport
from farm.web.responses import errors
from farm.web.security import require_token

Family = CounterMetricFamily | GaugeMetricFamily
REPORT_TTL_S = 3600.0
"""A run's lag is exported until this long after its last report (a finished run's gauges go away)."""
STALE_ACTIONS = ("withheld", "discarded", "dropped_groups")

router = APIRouter(dependencies=[Depends(require_token)], responses=errors(401))


@router.post("/metrics/offpolicy", status_code=204)
async def report_offpolicy(body: OffPolicyReport, farm: FarmState = Depends(farm_state)) -> None:
    """A consumer's off-policy lag at one batch's assembly (the DAPO consumer sends one per batch)."""
    entry = {**body.model_dump(mode="json"), "at": time.time()}
    counts = {action: int(getattr(body, action)) for action in STALE_ACTIONS}
    await AsyncOffPolicyStore(farm.redis).report(body.run_id, entry, counts)


async def offpolicy_reports(client: aioredis.Redis) -> list[dict[str, Any]]:
    """The last report of each run heard from within REPORT_TTL_S (older ones are forgotten)."""
    store = AsyncOffPolicyStore(client)
    now, reports = time.time(), await store.reports()
    stale = [run for run, entry in reports.items() if now - float(entry.get("at", 0)) >= REPORT_TTL_S]
    await store.forget(stale)
    return [entry for run, entry in sorted(reports.items()) if run not in stale]


def training_families(
    stats: Mapping[str, float], reports: list[dict[str, Any]], writer: Any | None
) -> list[Family]:
    """`writer`: the gateway's RecordWriterStats in this process (None before the gateway started)."""
    infra = CounterMetricFamily(
        "farm_infra_failures",
        "Jobs that ended with an infrastructure failure (farm.models.failures), per class: never a reward",
        labels=["class"],
    )
    for name, value in sorted(stats.items()):
        if name.startswith(keys.INFRA_FAILURES):
            infra.add_metric([name.removeprefix(keys.INFRA_FAILURES)], value)
    stale = CounterMetricFamily(
        "farm_stale_samples",
        "Samples past the off-policy bound at assembly, as the consumers reported them (withheld: tokens not "
        "shipped, reward kept in the baseline; discarded; dropped_groups: groups left out)",
        labels=["action"],
    )
    for action in STALE_ACTIONS:
        counted = keys.STALE_SAMPLES + action  # a field of the stats read above (a dict, not Redis)
        stale.add_metric([action], stats.get(counted, 0.0))
    return [infra, stale, *_lag_families(reports), *_writer_families(writer)]


def _lag_families(reports: list[dict[str, Any]]) -> list[Family]:
    versions = GaugeMetricFamily(
        "farm_offpolicy_lag_versions",
        "Policy versions between a sample's oldest turn and the batch that used it, in flight (published "
        "while it was generated) and in queue (published while it waited), at the run's last batch",
        labels=["run", "phase", "stat"],
    )
    seconds = GaugeMetricFamily(
        "farm_offpolicy_lag_seconds",
        "Seconds from submission to arrival (in flight) and from arrival to batch assembly (in queue) of "
        "the samples of the run's last batch",
        labels=["run", "phase", "stat"],
    )
    for report in reports:
        for phase in ("in_flight", "in_queue"):
            lag = report.get(phase) or {}
            for stat in ("max", "mean"):
                for family, unit in ((versions, "versions"), (seconds, "seconds")):
                    value = lag.get(f"{unit}_{stat}")
                    if value is not None:
                        family.add_metric([report["run_id"], phase, stat], float(value))
    return [versions, seconds]


def _writer_families(writer: Any | None) -> list[Family]:
    written = CounterMetricFamily(
        "farm_gateway_records_written", "Completion records the gateway stored (this API process)"
    )
    dropped = CounterMetricFamily(
        "farm_gateway_records_dropped",
        "Completion records the gateway could not store (this API process): the call answered an error",
    )
    wait = CounterMetricFamily(
        "farm_gateway_record_wait_seconds",
        "Seconds calls waited to store their completion records (back-pressure; this API process)",
    )
    wait_max = GaugeMetricFamily(
        "farm_gateway_record_wait_seconds_max",
        "Longest wait to store one completion record since this API process started (back-pressure)",
    )
    if writer is not None:
        written.add_metric([], float(writer.written))
        dropped.add_metric([], float(writer.dropped))
        wait.add_metric([], float(writer.wait_s_sum))
        wait_max.add_metric([], float(writer.wait_s_max))
    return [written, dropped, wait, wait_max]
