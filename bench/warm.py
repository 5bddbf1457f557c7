"""The warm pool against the cold path, in one run (`python -m bench.scale` prints it; alone:
`python -m bench.warm`).

Warm: a pool (containers/warm_pool.py) filled with `concurrent` sandboxes of one spec, then `concurrent`
threads released at once each claim one; the claim latency is each thread's own, from its call to the
sandbox handed over (relabelled, its claim recorded, its TTL set). Repeated `rounds` times, refilled in
between. Cold: what a claim replaces, a start, in the same run: `concurrent` starts at once (what init
pays without a pool when that many jobs arrive together), and the one-at-a-time path bench.tools holds to
<= 100 ms (start + first command + stop). `python -m bench.warm` adds the same 64 claims at once made as
a node's init workers make them: from 4 processes x 16 threads and 16 x 4 (the farm's init worker runs
4 threads), each process with its own pool.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path
from typing import Any

from bench.common import pct
from containers.local import LocalRuntime
from containers.sandbox import Sandbox
from containers.spec import SandboxSpec
from containers.warm_pool import DEMAND_TO_POOL, WarmPool

SPEC = SandboxSpec(die_with_parent=False, ttl_s=600, labels={"bench": "warm"})


@dataclass
class WarmFigures:
    concurrent: int
    claims: int
    claim_p50_ms: float
    claim_p99_ms: float
    alone_p50_ms: float
    alone_p99_ms: float
    fill_per_s: float
    cold_concurrent_p50_ms: float
    cold_concurrent_p99_ms: float
    cold_cycle_p50_ms: float
    cold_cycle_p99_ms: float


def _at_once(n: int, work: Callable[[int], Sandbox | None]) -> tuple[list[float], list[Sandbox]]:
    """Runs `work` in n threads released together; each one's own duration, and what they got."""
    took: list[float] = []
    got: list[Sandbox] = []
    barrier = threading.Barrier(n)

    def one(i: int) -> None:
        barrier.wait()
        began = time.perf_counter()
        sandbox = work(i)
        took.append(time.perf_counter() - began)
        if sandbox is not None:
            got.append(sandbox)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return took, got


def _stop_all(boxes: list[Sandbox]) -> None:
    for box in boxes:
        box.stop()


def _claims(
    pool: WarmPool, concurrent: int, rounds: int, filled: Callable[[], object] = lambda: None
) -> tuple[list[float], float]:
    """Claim latencies over `rounds` rounds of `concurrent` claims at once; the pool's fill rate.
    `filled` is called once the pool is full, before the claimers are released."""
    latencies: list[float] = []
    fill_s = 0.0
    for _ in range(rounds):
        began = time.monotonic()
        while pool.fill():
            pass
        fill_s += time.monotonic() - began
        filled()
        took, got = _at_once(concurrent, lambda i: pool.claim(SPEC))
        if len(got) != concurrent:
            raise RuntimeError(f"{concurrent - len(got)} claims found the pool empty")
        latencies += took
        _stop_all(got)
    return latencies, concurrent * rounds / max(fill_s, 1e-9)


def _claims_alone(pool: WarmPool, n: int) -> list[float]:
    """Claims one at a time: what a claim costs without 63 others contending for the interpreter."""
    while pool.fill():
        pass
    took, got = [], []
    for _ in range(n):
        began = time.perf_counter()
        sandbox = pool.claim(SPEC)
        took.append(time.perf_counter() - began)
        if sandbox is None:
            raise RuntimeError("a claim found the pool empty")
        got.append(sandbox)
    _stop_all(got)
    return took


def _cold_cycles(runtime: LocalRuntime, n: int) -> list[float]:
    took = []
    for _ in range(n):
        began = time.perf_counter()
        with runtime.start(SPEC) as sandbox:
            sandbox.exec("true")
        took.append(time.perf_counter() - began)
    return took


def _sandbox_uid() -> None:
    if shutil.which("bwrap") is None and "FARM_SANDBOX_UID" not in os.environ:
        os.environ["FARM_SANDBOX_UID"] = "0"  # as bench.scale: the wheel's bwrap under a 0700 /root


def _pool(runtime: LocalRuntime, budget: int) -> WarmPool:
    pool = WarmPool(runtime, idle_s=600)
    for _ in range(DEMAND_TO_POOL):
        pool.claim(SPEC)  # the demand that makes the spec pooled
    pool.set_budget(budget)
    return pool


def _claimer(threads: int, rounds: int, filled: Any, out: Any) -> None:
    """One init worker process of `per_process_claims`: its own pool, its own claiming threads."""
    root = Path(tempfile.mkdtemp(prefix="farm-bench-warm-"))
    pool = _pool(LocalRuntime(root), threads)
    try:
        out.put(_claims(pool, threads, rounds, filled.wait)[0])
    finally:
        pool.close()
        shutil.rmtree(root, ignore_errors=True)


def per_process_claims(procs: int, threads: int, rounds: int = 3) -> list[float]:
    """Claim latencies as a node's init workers claim: `procs` processes (each with its own pool, as each
    init worker owns one) of `threads` claiming threads, all released at once, `rounds` times."""
    _sandbox_uid()
    ctx = get_context("spawn")
    filled, out = ctx.Barrier(procs), ctx.Queue()
    workers = [ctx.Process(target=_claimer, args=(threads, rounds, filled, out)) for _ in range(procs)]
    for worker in workers:
        worker.start()
    try:
        return [x for _ in workers for x in out.get(timeout=600)]
    finally:
        for worker in workers:
            worker.join(60)


def warm_vs_cold(concurrent: int = 64, rounds: int = 3, cycles: int = 20) -> WarmFigures:
    _sandbox_uid()
    root = Path(tempfile.mkdtemp(prefix="farm-bench-warm-"))
    runtime = LocalRuntime(root)
    pool = _pool(runtime, concurrent)
    try:
        claims, fill_rate = _claims(pool, concurrent, rounds)
        alone = _claims_alone(pool, concurrent)
        cold, boxes = _at_once(concurrent, lambda i: runtime.start(SPEC))
        _stop_all(boxes)
        cycle = _cold_cycles(runtime, cycles)
    finally:
        pool.close()
        shutil.rmtree(root, ignore_errors=True)
    return WarmFigures(
        concurrent=concurrent,
        claims=len(claims),
        claim_p50_ms=pct(claims, 0.5) * 1000,
        claim_p99_ms=pct(claims, 0.99) * 1000,
        alone_p50_ms=pct(alone, 0.5) * 1000,
        alone_p99_ms=pct(alone, 0.99) * 1000,
        fill_per_s=fill_rate,
        cold_concurrent_p50_ms=pct(cold, 0.5) * 1000,
        cold_concurrent_p99_ms=pct(cold, 0.99) * 1000,
        cold_cycle_p50_ms=pct(cycle, 0.5) * 1000,
        cold_cycle_p99_ms=pct(cycle, 0.99) * 1000,
    )


def rows(w: WarmFigures) -> list[tuple[str, str]]:
    return [
        (
            f"warm pool: claim, {w.concurrent} at once",
            f"p50 {w.claim_p50_ms:.1f} ms, p99 {w.claim_p99_ms:.1f} ms ({w.claims} claims; "
            f"refilled at {w.fill_per_s:.1f} sandboxes/s)",
        ),
        ("warm pool: claim, one at a time", f"p50 {w.alone_p50_ms:.2f} ms, p99 {w.alone_p99_ms:.2f} ms"),
        (
            f"cold: start, {w.concurrent} at once",
            f"p50 {w.cold_concurrent_p50_ms:.0f} ms, p99 {w.cold_concurrent_p99_ms:.0f} ms",
        ),
        (
            "cold: start + first command + stop, one at a time",
            f"p50 {w.cold_cycle_p50_ms:.1f} ms, p99 {w.cold_cycle_p99_ms:.1f} ms",
        ),
    ]


def verdicts(w: WarmFigures) -> list[str]:
    claim_ok = w.claim_p50_ms <= 10 and w.claim_p99_ms <= 50
    cold_ok = w.cold_cycle_p50_ms <= 100
    return [
        f"warm claim p50 <= 10 ms and p99 <= 50 ms, {w.concurrent} at once: {_verdict(claim_ok)}",
        f"cold start + first command + stop p50 <= 100 ms: {_verdict(cold_ok)}",
    ]


def _verdict(ok: bool) -> str:
    return "met" if ok else "NOT met"


SPLITS = ((4, 16), (16, 4))
"""(processes, threads) making 64 claims at once as init workers would: the farm's init worker runs 4
threads by default (farm/launcher.py)."""


def main() -> None:
    print(f"bench.warm: {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}")
    figures = warm_vs_cold()
    table = rows(figures)
    for procs, threads in SPLITS:
        claims = per_process_claims(procs, threads)
        table.append(
            (
                f"warm pool: claim, {procs * threads} at once from {procs} processes x {threads} threads",
                f"p50 {pct(claims, 0.5) * 1000:.1f} ms, p99 {pct(claims, 0.99) * 1000:.1f} ms "
                f"({len(claims)} claims; load {os.getloadavg()[0]:.1f})",
            )
        )
    width = max(len(k) for k, _ in table)
    print("\n".join(f"{k:<{width}}  {v}" for k, v in table))
    print("\n".join(verdicts(figures)))
    print(f"load after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
