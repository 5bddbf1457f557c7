"""What a rollout costs the farm's Redis: commands per no-op rollout, per LLM call of a math rollout,
Redis CPU per rollout, the projected rollouts/s one Redis core sustains, and the idle farm's rate.

    python -m bench.redis_cost [--noop 200] [--math 24] [--idle-s 10] [--cluster]   (extra: bench)

Every count comes from Redis itself (`INFO commandstats`, reset before each phase), so it includes
everything every process does: the API, the waiter, the workers' hand-offs, leases, heartbeats,
monitors and sweeps, the backend pool and Celery's own broker traffic. One farm (API, one worker
per stage queue, the scripted reference LLM) on an embedded Redis; with --cluster on an embedded
Redis Cluster of three masters (FARM_REDIS_URL=redis+cluster://) with the broker on an embedded plain
Redis (FARM_BROKER_URL), every count summed over the four servers.

Goals (issue 18): <= 50 commands per no-op rollout, idle farm <= 10 commands/s.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import threading
import time
import uuid
from collections import Counter

import httpx
import redis
from rich.console import Console
from rich.table import Table

from bench.common import parse_quick
from farm.embedded_redis import EmbeddedCluster, EmbeddedRedis
from farm.launcher import LocalFarm, default_workers

MATH = {
    "handler": "math",
    "question": "What is 84 * 76 + 123?",
    "answer": "6507",
}


def command_counts(clients: list[redis.Redis]) -> Counter[str]:
    counts: Counter[str] = Counter()
    for client in clients:
        stats = client.info("commandstats")
        counts.update({name.removeprefix("cmdstat_"): int(v["calls"]) for name, v in stats.items()})
    return counts


def redis_cpu_s(clients: list[redis.Redis]) -> float:
    infos = [client.info("cpu") for client in clients]
    return sum(float(info["used_cpu_sys"]) + float(info["used_cpu_user"]) for info in infos)


def measure(clients: list[redis.Redis], action) -> tuple[Counter[str], float, float, object]:
    """(commands by name, Redis CPU seconds, wall seconds, the action's result) for one phase."""
    for client in clients:
        client.config_resetstat()
    cpu0, t0 = redis_cpu_s(clients), time.perf_counter()
    result = action()
    wall, cpu = time.perf_counter() - t0, redis_cpu_s(clients) - cpu0
    counts = command_counts(clients)
    # The bench's own INFO/CONFIG calls are not the farm's.
    for own in ("info", "config|resetstat", "config"):
        counts.pop(own, None)
    return counts, cpu, wall, result


def round_trips(url: str, action) -> tuple[int, int]:
    """(commands clients sent, commands scripts ran) while `action` runs, read from MONITOR: a Lua
    script is one round trip however many commands it runs inside."""
    counts = {"client": 0, "lua": 0}
    stop = threading.Event()
    started = threading.Event()

    def watch() -> None:
        with redis.Redis.from_url(url).monitor() as monitor:
            started.set()
            for entry in monitor.listen():
                if stop.is_set():
                    return
                counts["lua" if entry.get("client_type") == "lua" else "client"] += 1

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    started.wait(5)
    action()
    stop.set()
    redis.Redis.from_url(url).ping()  # one more command wakes the watcher so it sees `stop`
    thread.join(5)
    return counts["client"] - 1, counts["lua"]


def run_jobs(api: str, instance: dict, n: int) -> list[dict]:
    results = []
    with httpx.Client(base_url=api, timeout=120) as http:
        for _ in range(n):
            answer = http.post("/process", json={"instance": instance, "job_id": uuid.uuid4().hex})
            answer.raise_for_status()
            body = answer.json()
            assert body["state"] == "done", body
            results.append(body)
    return results


def llm_calls(results: list[dict]) -> int:
    calls = 0
    for result in results:
        for trace in (result.get("trajectory") or {}).get("traces", []):
            calls += int((trace.get("metadata") or {}).get("turns") or 0)
    return calls


def top(counts: Counter[str], per: float, k: int = 8) -> str:
    return ", ".join(f"{name} {calls / per:.1f}" for name, calls in counts.most_common(k))


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--noop", type=int, default=200, help="sequential no-op rollouts")
    parser.add_argument("--math", type=int, default=24, help="sequential sandboxed math rollouts")
    parser.add_argument("--idle-s", type=float, default=10.0, help="seconds of an idle farm")
    parser.add_argument("--cluster", action="store_true", help="the farm on a 3-master Redis Cluster")
    args = parse_quick(parser, noop=20, math=2, idle_s=2.0)
    console = Console()

    with contextlib.ExitStack() as stack:
        server = stack.enter_context(EmbeddedRedis())
        env: dict[str, str] = {}
        url, clients = server.url, [redis.Redis.from_url(server.url, decode_responses=True)]
        if args.cluster:  # the plain server is the broker
            cluster = stack.enter_context(EmbeddedCluster())
            url, env = cluster.url, {"FARM_BROKER_URL": server.url}
            clients += [redis.Redis(port=port, decode_responses=True) for port in cluster.ports]
        os.environ.update({"FARM_REDIS_URL": url, **env})
        with LocalFarm(redis_url=url, workers=default_workers(run_concurrency=4), env=env) as farm:
            run_jobs(farm.api_url, {"handler": "noop"}, 20)  # warm up imports and connections
            time.sleep(2.0)  # let start-up sweeps and registrations settle
            idle, idle_cpu, idle_wall, _ = measure(clients, lambda: time.sleep(args.idle_s))
            noop, noop_cpu, noop_wall, _ = measure(
                clients, lambda: run_jobs(farm.api_url, {"handler": "noop"}, args.noop)
            )
            math, math_cpu, _, math_results = measure(
                clients, lambda: run_jobs(farm.api_url, MATH, args.math)
            )
            sent, in_scripts = (
                (0, 0)
                if args.cluster
                else round_trips(server.url, lambda: run_jobs(farm.api_url, {"handler": "noop"}, 50))
            )

    # Commands the idle farm would have issued anyway during the measured phases are not the rollouts'.
    idle_rate = sum(idle.values()) / idle_wall
    noop_total = sum(noop.values()) - idle_rate * noop_wall
    calls = llm_calls(math_results)  # type: ignore[arg-type]
    per_noop = noop_total / args.noop
    cpu_per_noop = noop_cpu / args.noop

    where = "a 3-master Redis Cluster + its broker" if args.cluster else "one embedded Redis"
    table = Table(title=f"Redis cost of the farm ({where}; counts from INFO commandstats)")
    for col in ("phase", "commands", "per unit", "Redis CPU per unit", "goal"):
        table.add_column(col, justify="right")
    table.add_row(
        f"idle farm, {args.idle_s:.0f} s",
        f"{sum(idle.values())}",
        f"{idle_rate:.1f}/s",
        f"{idle_cpu / idle_wall * 1000:.2f} ms/s",
        "<= 10/s",
    )
    table.add_row(
        f"no-op rollout x{args.noop}",
        f"{sum(noop.values())}",
        f"{per_noop:.1f}/rollout",
        f"{cpu_per_noop * 1000:.3f} ms",
        "<= 50",
    )
    table.add_row(
        f"math rollout x{args.math} ({calls} LLM calls)",
        f"{sum(math.values())}",
        f"{sum(math.values()) / max(args.math, 1):.1f}/rollout, "
        f"{sum(math.values()) / max(calls, 1):.1f}/LLM call",
        f"{math_cpu / max(args.math, 1) * 1000:.3f} ms",
        "-",
    )
    console.print(table)
    console.print(
        f"projected no-op rollouts/s on one Redis core: {1 / cpu_per_noop:.0f}" if cpu_per_noop else ""
    )
    if not args.cluster:
        console.print(
            f"no-op rollout, round trips (MONITOR, 50 rollouts): {sent / 50:.1f} commands sent by clients "
            f"per rollout, {in_scripts / 50:.1f} more run inside their Lua scripts"
        )
    console.print(f"idle, commands/s by name: {top(idle, idle_wall)}")
    console.print(f"no-op, commands/rollout by name: {top(noop, args.noop, 12)}")


if __name__ == "__main__":
    main()
