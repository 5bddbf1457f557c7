"""Exec round trips with every sandbox of a node busy, driven from client processes as a farm's run
workers drive them (bench.scale prints these; they need sandboxes already started).

Agent-paced: each sandbox is one agent's. The agent runs a command, then waits for its model's next turn
(an exponential pause, mean 1/rate seconds), then runs the next: the commands of a rollout arrive at an
agent's pace, not back to back. The commands are a mix of what coding agents run (a file read, a
listing, a search, a pipeline, a file written, a short Python; `AGENT_MIX`). Swept over the rate per
sandbox, each step reports the round trip over every command, the round trip less the command's own run
time as the execution server timed it (the exec path: client, socket, server, process start and reap),
the commands/s offered and the CPU they used, so the p99 is read at a stated load and the sweep shows
where the cores saturate.

Back to back: `clients` callers with no pause, each cycling over its share of the sandboxes (the
saturated figure), here spread over client processes, to compare with the same load from 64 threads of
one process (bench.scale's other rows): whether one client process's interpreter is in the way.
"""

from __future__ import annotations

import contextlib
import os
import random
import threading
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from multiprocessing import get_context
from typing import Any

import psutil

from bench.common import pct
from containers.runtime import attach
from containers.sandbox import Sandbox

AGENT_MIX: tuple[tuple[str, int], ...] = (
    ("cat /etc/os-release", 3),
    ("ls -la /etc | head -20", 2),
    ("grep -n root /etc/passwd /etc/group", 2),
    ("seq 1 5000 | sort -rn | head -3", 2),
    ("printf '%s\\n' $(seq 1 200) > notes.txt && wc -l notes.txt", 2),
    ("python3 -c 'print(sum(i * i for i in range(10000)))'", 1),
)
"""(command, weight): one command in twelve starts a Python interpreter, the rest are shell work."""
CLIENT_PROCS = 4
"""Client processes the load comes from (a node's run workers are several processes too)."""


@dataclass
class LoadFigures:
    label: str
    sandboxes: int
    commands: int
    failed: int
    per_s: float
    """Commands per second over the run, all sandboxes together."""
    p50_ms: float
    p99_ms: float
    shell_p99_ms: float
    """p99 of the commands that start no Python (what most agent calls are)."""
    path_p50_ms: float
    path_p99_ms: float
    """The round trip less the command's own run time as the execution server measured it."""
    cpu_s_per_s: float
    """CPU seconds a second of the clients and the sandboxes (servers and their commands)."""
    machine_busy: float
    """Share of all the machine's cores busy over the run, every process on it counted."""


@dataclass
class _Part:
    """What one client process measured."""

    latencies: list[float] = field(default_factory=list)
    path: list[float] = field(default_factory=list)
    shell: list[float] = field(default_factory=list)
    failed: int = 0
    cpu_s: float = 0.0


def _commands(mix: str) -> tuple[list[str], list[int]]:
    if mix == "agent":
        return [c for c, _ in AGENT_MIX], [w for _, w in AGENT_MIX]
    return [mix], [1]


def _caller(
    boxes: list[Sandbox],
    rate: float,
    mix: str,
    until: float,
    rng: random.Random,
    part: _Part,
    lock: threading.Lock,
) -> None:
    """One agent (rate > 0: a pause before each command) or back-to-back caller (rate 0), cycling over
    `boxes`, until the deadline."""
    commands, weights = _commands(mix)
    i = 0
    while True:
        pause = rng.expovariate(rate) if rate > 0 else 0.0
        if time.monotonic() + pause >= until:
            return
        time.sleep(pause)
        command = rng.choices(commands, weights)[0]
        began = time.perf_counter()
        try:
            result = boxes[i % len(boxes)].exec(command, timeout=60)
        except Exception:  # counted, and this caller stops: the run reports it rather than ending
            with lock:
                part.failed += 1
            return
        took = time.perf_counter() - began
        i += 1
        with lock:
            part.latencies.append(took)
            part.path.append(max(0.0, took - result.duration_s))
            if "python" not in command:
                part.shell.append(took)
            if result.exit_code != 0:
                part.failed += 1


def _drive(
    groups: list[list[dict[str, Any]]], rate: float, mix: str, start_at: float, seconds: float, seed: int
) -> _Part:
    """In a client process: one thread per group of sandbox handles, all starting at `start_at` (wall
    clock, shared by the processes)."""
    rng = random.Random(seed)
    boxes = [[attach(h) for h in group] for group in groups]
    for group in boxes:  # connect before the clock starts
        for box in group:
            box.client.call("ping", timeout=30)
    part, lock = _Part(), threading.Lock()
    time.sleep(max(0.0, start_at - time.time()))
    until = time.monotonic() + seconds
    me = psutil.Process()
    cpu0 = sum(me.cpu_times()[:2])
    threads = [
        threading.Thread(target=_caller, args=(g, rate, mix, until, random.Random(rng.random()), part, lock))
        for g in boxes
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    part.cpu_s = sum(me.cpu_times()[:2]) - cpu0
    for group in boxes:
        for box in group:
            box.client.close()
    return part


class ServersCpu:
    """CPU seconds of the sandboxes' execution servers, with the commands they ran and reaped: each server
    is the child of its sandbox's pid-namespace init, found once in one pass over the machine's processes
    (a pass per sandbox takes seconds with 256 of them)."""

    def __init__(self, boxes: list[Sandbox]) -> None:
        inits = {box.info.init_pid for box in boxes}
        self._servers = [p for p in psutil.process_iter(["ppid"]) if p.info["ppid"] in inits]

    def __call__(self) -> float:
        total = 0.0
        for server in self._servers:
            with contextlib.suppress(psutil.Error):
                t = server.cpu_times()
                total += t.user + t.system + t.children_user + t.children_system
        return total


def _busy_share(before: Any, after: Any) -> float:
    total = sum(after) - sum(before)
    idle = (after.idle - before.idle) + (after.iowait - before.iowait)
    return 1 - idle / total if total > 0 else 0.0


class ExecLoad:
    """Client processes spawned once and reused for every run over the same sandboxes."""

    def __init__(self, boxes: list[Sandbox], servers_cpu_s: ServersCpu) -> None:
        self.handles = [box.handle() for box in boxes]
        self._servers_cpu_s = servers_cpu_s
        self._pool = ProcessPoolExecutor(CLIENT_PROCS, mp_context=get_context("spawn"))

    def close(self) -> None:
        self._pool.shutdown()

    def run(
        self, label: str, rate: float, mix: str, seconds: float, callers: int | None = None
    ) -> LoadFigures:
        """`callers` threads in all (default: one per sandbox), each over its own sandboxes, spread
        over the client processes."""
        n, boxes = callers or len(self.handles), len(self.handles)
        # disjoint shares of the sandboxes; more callers than sandboxes share them, each its own connection
        groups = (
            [self.handles[i::n] for i in range(n)]
            if n <= boxes
            else [[self.handles[i % boxes]] for i in range(n)]
        )
        start_at = time.time() + 3.0  # every process has attached and connected by then
        servers0 = self._servers_cpu_s()
        futures = [
            self._pool.submit(_drive, groups[p::CLIENT_PROCS], rate, mix, start_at, seconds, seed=p)
            for p in range(CLIENT_PROCS)
        ]
        time.sleep(max(0.0, start_at - time.time()))
        machine0, began = psutil.cpu_times(), time.monotonic()
        parts = [f.result() for f in futures]
        took = time.monotonic() - began
        machine1 = psutil.cpu_times()
        servers = self._servers_cpu_s() - servers0
        latencies = [x for p in parts for x in p.latencies]
        path = [x for p in parts for x in p.path]
        shell = [x for p in parts for x in p.shell] or [0.0]
        return LoadFigures(
            label=label,
            sandboxes=len(self.handles),
            commands=len(latencies),
            failed=sum(p.failed for p in parts),
            per_s=len(latencies) / took,
            p50_ms=pct(latencies, 0.5) * 1000,
            p99_ms=pct(latencies, 0.99) * 1000,
            shell_p99_ms=pct(shell, 0.99) * 1000,
            path_p50_ms=pct(path, 0.5) * 1000,
            path_p99_ms=pct(path, 0.99) * 1000,
            cpu_s_per_s=(servers + sum(p.cpu_s for p in parts)) / took,
            machine_busy=_busy_share(machine0, machine1),
        )


@dataclass
class MixCost:
    cpu_ms: dict[str, float]
    """CPU of each command of AGENT_MIX in its sandbox (server and command), run one at a time."""

    @property
    def mean_ms(self) -> float:
        weights = dict(AGENT_MIX)
        return sum(self.cpu_ms[c] * w for c, w in weights.items()) / sum(weights.values())


def mix_cost(box: Sandbox, servers: ServersCpu, repeat: int = 30) -> MixCost:
    """What each command of the agent mix costs alone, on one sandbox, before any load."""
    cpu_ms = {}
    for command, _ in AGENT_MIX:
        box.exec(command, timeout=60)
        before = servers()
        for _ in range(repeat):
            box.exec(command, timeout=60)
        cpu_ms[command] = (servers() - before) / repeat * 1000
    return MixCost(cpu_ms)


def cost_rows(cost: MixCost) -> list[tuple[str, str]]:
    cores = os.cpu_count() or 1
    each = ", ".join(f"{c.split()[0]} {ms:.1f}" for c, ms in cost.cpu_ms.items())
    return [
        (
            "agent mix: CPU a command, one at a time (ms)",
            f"{each}; weighted mean {cost.mean_ms:.1f} ms: {cores} idle cores serve at most "
            f"{cores * 1000 / cost.mean_ms:.0f} commands/s",
        )
    ]


def rows(figures: list[LoadFigures]) -> list[tuple[str, str]]:
    cores = os.cpu_count() or 1
    return [
        (
            f.label,
            f"p50 {f.p50_ms:.1f} ms, p99 {f.p99_ms:.1f} ms (shell commands only: p99 {f.shell_p99_ms:.1f}); "
            f"exec path p50 {f.path_p50_ms:.1f} / p99 {f.path_p99_ms:.1f} ms; {f.per_s:.0f} commands/s "
            f"({f.commands:,}, {f.failed} failed), {f.cpu_s_per_s:.2f} CPU-s/s = {f.cpu_s_per_s / cores:.0%} "
            f"of {cores} cores; machine {f.machine_busy:.0%} busy",
        )
        for f in figures
    ]
