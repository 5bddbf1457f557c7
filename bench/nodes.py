"""`python -m bench.nodes [--cluster] [--jobs N] [--quick]`: the partition scenario of
bench/netlab/scenario.py (three nodes in their own network namespaces; a cut longer than a lease, a node
killed, a lossy link) with its table of outcomes and recovery times. Needs root, iproute2 and util-linux."""

from __future__ import annotations

import argparse
import os
import sys
import time

from bench.netlab.netfarm import NetFarm, NodeSpec
from bench.netlab.netlab import sweep_leftovers, unavailable_reason
from bench.netlab.scenario import Sizes, run


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--cluster", action="store_true", help="a 3-master Redis Cluster (else one Redis)")
    parser.add_argument("--jobs", type=int, default=800)
    parser.add_argument("--quick", action="store_true", help="300 jobs, shorter faults")
    args = parser.parse_args()
    reason = unavailable_reason()
    if reason:
        sys.exit(f"bench.nodes: {reason}")
    sizes = Sizes(jobs=args.jobs, min_in_flight=min(500, int(args.jobs * 0.8)))
    if args.quick:
        sizes = Sizes(jobs=300, min_in_flight=200, cut_s=12.0, degrade_s=15.0)
    swept = sweep_leftovers()
    if swept:
        print(f"removed leftovers of an earlier run: {', '.join(swept)}")
    nodes = [NodeSpec(name, ["init:8", "run:24", "eval:8"]) for name in ("node-a", "node-b", "node-c")]
    farm = NetFarm(nodes, cluster=args.cluster, env={"FARM_STALL_GRACE_S": "5", "FARM_ORPHAN_GRACE_S": "2"})
    try:
        started = time.monotonic()
        farm.start(timeout_s=240)
        print(
            f"farm up in {time.monotonic() - started:.0f} s: Redis {farm.redis_url}, subnet {farm.lab.subnet}"
        )
        outcome = run(farm, sizes)
    finally:
        farm.close()
    load = os.getloadavg()
    print(
        f"\nbench.nodes ({'cluster of 3 masters' if args.cluster else 'one Redis'}, {os.cpu_count()} cores, "
        f"load {load[0]:.1f}/{load[1]:.1f}/{load[2]:.1f}):"
    )
    print(outcome.table())
    print("\nresult:", "ok" if outcome.ok else "FAILED")
    sys.exit(0 if outcome.ok else 1)


if __name__ == "__main__":
    main()
