"""The API on a busy host: p50/p99 latency of POST /process, GET /jobs/<id> and GET /status, first on
an idle host, then with CPU hogs on twice the cores (busy loops at the farm's own priority, as
sandboxes and other tenants would be), side by side. The target: p99 <= 1 s under that load.

    python -m bench.api_load [--n 200] [--hogs 2x] [--quick]

A farm of no-op rollouts (no LLM); requests are sequential from one client, so each figure is the
API's answer time, not a queue of the client's own making. The hogs die with the bench, even SIGKILLed
(farm/children.py).
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import httpx
from rich.console import Console
from rich.table import Table

from bench.common import pct
from farm.children import spawn
from farm.launcher import LocalFarm, WorkerSpec

HOG = "while True: pass"
ROUTES = ("POST /process", "GET /jobs/<id>", "GET /status")
TARGET_P99_S = 1.0


def measure(api: str, n: int) -> dict[str, list[float]]:
    times: dict[str, list[float]] = {route: [] for route in ROUTES}
    with httpx.Client(base_url=api, timeout=60) as http:
        for _ in range(n):
            started = time.perf_counter()
            answer = http.post("/process", json={"instance": {"handler": "noop"}, "wait": False})
            times["POST /process"].append(time.perf_counter() - started)
            job_id = answer.json()["job_id"]
            started = time.perf_counter()
            http.get(f"/jobs/{job_id}").raise_for_status()
            times["GET /jobs/<id>"].append(time.perf_counter() - started)
            started = time.perf_counter()
            http.get("/status").raise_for_status()
            times["GET /status"].append(time.perf_counter() - started)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=200, help="requests per route and phase")
    parser.add_argument("--hogs", type=int, default=2 * (os.cpu_count() or 1), help="busy loops (2x cores)")
    parser.add_argument("--quick", action="store_true", help="a CI-sized run (--n 30)")
    args = parser.parse_args()
    n = 30 if args.quick else args.n
    workers = [WorkerSpec(q, concurrency=2) for q in ("init", "run", "eval")]
    console = Console()
    with LocalFarm(workers=workers, llm_policy=None) as farm:
        measure(farm.api_url, 5)  # warm connections and code paths
        idle = measure(farm.api_url, n)
        load_before = os.getloadavg()[0]
        hogs = [spawn([sys.executable, "-c", HOG]) for _ in range(args.hogs)]
        try:
            time.sleep(2.0)  # the hogs take the cores
            loaded = measure(farm.api_url, n)
            load_during = os.getloadavg()[0]
        finally:
            for hog in hogs:
                hog.kill()
            for hog in hogs:
                hog.wait()
    table = Table(
        title=f"API latency, {n} sequential requests per route: idle (load {load_before:.1f}) vs "
        f"{args.hogs} CPU hogs on {os.cpu_count()} cores (load {load_during:.1f})"
    )
    for column in (
        "route",
        "idle p50 ms",
        "idle p99 ms",
        "loaded p50 ms",
        "loaded p99 ms",
        "p99 ratio",
        "p99<=1s",
    ):
        table.add_column(column, justify="right")
    for route in ROUTES:
        i99, l99 = pct(idle[route], 0.99), pct(loaded[route], 0.99)
        table.add_row(
            route,
            f"{pct(idle[route], 0.5) * 1000:.1f}",
            f"{i99 * 1000:.1f}",
            f"{pct(loaded[route], 0.5) * 1000:.1f}",
            f"{l99 * 1000:.1f}",
            f"{l99 / i99:.1f}x",
            "yes" if l99 <= TARGET_P99_S else "NO",
        )
    console.print(table)


if __name__ == "__main__":
    main()
