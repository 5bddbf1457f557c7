"""A weight publish aborts nothing: with 64 multi-turn rollouts in flight the trainer publishes new weights
(the server's weight_version, then the pool's policy_version, with no clear); every rollout finishes, each
turn of each trace records the version that served it, and DAPO batches assembled afterwards hold the
staleness bound (max_offpolicyness) on the oldest turn of every sample."""

from __future__ import annotations

import itertools
import json
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from farm.client import DapoConfig, DapoConsumer, FarmClient
from farm.launcher import LocalFarm, WorkerSpec
from farm.models import JobState
from tests.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]

GROUPS = 24
"""Groups the loader holds: 8 for the first batch, the rest for the second and what is left over."""
PROBLEMS = Path(__file__).resolve().parents[2] / "handlers" / "math" / "problems.jsonl"


@pytest.fixture(scope="module")
def publish_farm() -> Iterator[LocalFarm]:
    logs = Path(tempfile.mkdtemp(prefix="farm-publish-"))
    local = LocalFarm(
        workers=[WorkerSpec("init,eval", concurrency=8), WorkerSpec("run", concurrency=64)],
        # A per-token latency keeps the 64 rollouts in flight across the publish.
        llm_args=["--accuracy", "1", "--seed", "3", "--token-latency-ms", "25", "--emulate", "sglang"],
        env={"FARM_WORKDIR": str(logs / "work")},
        log_dir=logs,
    )
    local.start(timeout_s=180)
    yield local
    local.stop()


def _instances() -> Iterator[dict[str, Any]]:
    problems = [json.loads(line) for line in PROBLEMS.read_text().splitlines() if line.strip()]
    while True:
        for p in problems:
            yield {"handler": "math", "question": p["question"], "answer": p["answer"]}


def _publish(root: str, farm: FarmClient, address: str, version: int) -> None:
    """The scripted policy has no weights: SGLang's /update_weight_version labels what it serves."""
    httpx.post(f"{root}/update_weight_version", json={"new_version": str(version)}).raise_for_status()
    farm.add_llm_server(address, kind="sglang", policy_version=version)


def _mid_flight(farm: FarmClient) -> bool:
    """Rollouts are in their run stage (between turns or in a call) and the backend is serving one."""
    running = farm.status()["jobs"].get("run", 0)
    return running >= 16 and sum(b.in_flight for b in farm.llm_servers()) >= 1


def test_publish_with_64_rollouts_in_flight(publish_farm: LocalFarm) -> None:
    address = publish_farm.llm_urls[0]
    root = address.removesuffix("/v1")
    config = DapoConfig(
        n=8, concurrency=64, filter_zero_variance=False, carry_over=True, max_staleness=None,
        max_offpolicyness=1, sampling_params={"temperature": 1.0, "max_tokens": 256}, seed=5,
    )  # fmt: skip
    with (
        FarmClient(publish_farm.api_url) as farm,
        DapoConsumer(publish_farm.api_url, itertools.islice(_instances(), GROUPS), config) as dapo,
    ):
        _publish(root, farm, address, 0)
        published = threading.Event()

        def publish_mid_flight() -> None:
            wait_until(lambda: _mid_flight(farm), 300, what="16 rollouts in their run stage", interval_s=0.05)
            _publish(root, farm, address, 1)
            published.set()

        publisher = threading.Thread(target=publish_mid_flight, daemon=True)
        publisher.start()
        first = dapo.next_batch(8, policy_version=0, timeout_s=600)
        publisher.join(310)
        assert published.is_set()
        _publish(root, farm, address, 2)
        second = dapo.next_batch(4, policy_version=2, timeout_s=600)
        # Drain the finite loader, so closing has nothing in flight to cancel.
        rest = dapo.next_batch(GROUPS, policy_version=2, timeout_s=600)
        assert rest.stats.exhausted

    results = first.results
    assert len(results) == 64
    assert [r.state for r in results] == [JobState.done] * 64, [r.error for r in results if r.error]
    mixed = 0
    for result in results:
        (trace,) = result.trajectory.traces
        versions = trace.metadata["turn_policy_versions"]
        assert len(versions) == trace.metadata["turns"] >= 2  # multi-turn: a tool call, then the answer
        assert trace.metadata["turn_policy_version_sources"] == ["backend"] * len(versions)
        assert versions == sorted(versions) and set(versions) <= {0, 1}
        mixed += len(set(versions)) > 1
    assert mixed >= 1  # rollouts that crossed the publish kept going, their later turns on version 1
    report = second.stats.staleness
    assert report is not None and report.max is not None and report.max <= 1 and report.bound == 1
    for result in second.results:
        assert result.state is JobState.done
        assert 2 - min(result.trajectory.traces[0].metadata["turn_policy_versions"]) <= 1
    assert report.histogram and sum(report.histogram.values()) == len(second.results) == 32
