"""Partitions, not just kills (bench/netlab/scenario.py): three nodes in their own network namespaces,
Redis and the LLM in another; mid-run one node is cut off for longer than a lease and healed, one is
killed outright, one's link drops and delays packets. Every job must end exactly once, no stage may run
in two attempts at once, no sandbox may outlive the heal, the API must answer throughout. Runs once on
one Redis and once on a three-master Redis Cluster. `pytest -s` prints the table with recovery times.

Needs root, `ip`, `tc` and `unshare` (iproute2, util-linux); skips with the reason otherwise."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from bench.netlab.netfarm import NetFarm, NodeSpec
from bench.netlab.netlab import NetLabUnavailable, sweep_leftovers, unavailable_reason
from bench.netlab.scenario import Sizes, run

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.timeout(900),  # one farm of three nodes per variant; minutes on a loaded 2-core machine
    pytest.mark.skipif(unavailable_reason() is not None, reason=str(unavailable_reason())),
]

NODES = [NodeSpec(name, ["init:8", "run:24", "eval:8"]) for name in ("node-a", "node-b", "node-c")]
ENV = {"FARM_STALL_GRACE_S": "5", "FARM_ORPHAN_GRACE_S": "2"}


@pytest.fixture(params=[False, True], ids=["redis", "cluster"])
def netfarm(request: pytest.FixtureRequest) -> Iterator[NetFarm]:
    sweep_leftovers()  # what a killed earlier run left
    farm = NetFarm(NODES, cluster=request.param, env=ENV)
    request.addfinalizer(farm.close)  # before start(): whatever start made is removed even if it fails
    try:
        farm.start(timeout_s=240)
    except NetLabUnavailable as exc:
        pytest.skip(str(exc))
    yield farm


def test_partitions_kill_and_lossy_link(netfarm: NetFarm) -> None:
    outcome = run(netfarm, Sizes())
    print(f"\npartition suite ({'cluster' if netfarm.cluster else 'one Redis'}):\n{outcome.table()}")
    assert not outcome.lost, outcome.lost[:20]
    assert outcome.finalized == outcome.jobs
    assert not outcome.overlaps, outcome.overlaps[:20]
    assert not outcome.past_lease, outcome.past_lease[:20]
    assert not any(outcome.sandboxes_left.values()), outcome.sandboxes_left
    assert not outcome.sandbox_processes_left
    assert not outcome.api_failures, outcome.api_failures[:10]
    assert outcome.peak_in_flight >= 500
