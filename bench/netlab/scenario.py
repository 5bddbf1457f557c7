"""Partitions, not just kills: the scenario the slow test and `python -m bench.nodes` both run.

Three nodes take a batch of multi-stage rollouts (probe jobs, bench/netlab/probe.py, that hold their run
stage for seconds, and one in ten a math rollout with a sandbox). Once at least `min_in_flight` jobs are
in flight: node A loses its link for `cut_s` (longer than a lease), then gets it back; node C dies (its
whole pid namespace: workers and sandboxes); node B's link is degraded (delay and loss) for a while. The
API is probed all along. When every job has ended, C boots again on the same disk.

What is checked and returned (`Outcome`): every job ends exactly once (finalized count == jobs, each
job terminal), no stage of any probe job ran in two attempts at once (from the probe's own start/stop
records), no sandbox is left on any node (directories and processes) after the heal and the reboot,
and the API answered every probe. Recovery times: how long after the fault the stages that A or C held
began again elsewhere, how long A took to rejoin after the heal, and how long the whole batch took."""

from __future__ import annotations

import itertools
import random
import statistics
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Self

import httpx
import psutil

from bench.common import poll
from bench.netlab.netfarm import NetFarm
from bench.netlab.probe import read_attempts
from farm.jobs.store import LEASE_TTL_S

TERMINAL = {"done", "failed", "cancelled", "timeout"}


@dataclass
class Sizes:
    jobs: int = 800
    min_in_flight: int = 500
    per_task: int = 10
    run_s: tuple[float, float] = (2.0, 5.0)
    long_every: int = 10
    long_run_s: tuple[float, float] = (15.0, 20.0)
    """One task in `long_every` holds its run stage longer than a cut lasts: a cut-off node's attempt of it
    is still running when the stage is re-sent elsewhere, unless the node stops it by its own clock."""
    math_every: int = 10
    cut_s: float = 3 * LEASE_TTL_S
    degrade_s: float = 25.0
    kill_after_s: float = 3.0
    end_within_s: float = 180.0


@dataclass
class Outcome:
    jobs: int = 0
    peak_in_flight: int = 0
    states: Counter[str] = field(default_factory=Counter)
    finalized: int = 0
    lost: list[str] = field(default_factory=list)
    overlaps: list[str] = field(default_factory=list)
    past_lease: list[str] = field(default_factory=list)
    sandboxes_left: dict[str, list[str]] = field(default_factory=dict)
    sandbox_processes_left: list[int] = field(default_factory=list)
    api_probes: int = 0
    api_failures: list[str] = field(default_factory=list)
    api_p99_ms: float = 0.0
    api_max_ms: float = 0.0
    times: dict[str, float] = field(default_factory=dict)
    """Recovery and run times, seconds."""
    notes: list[str] = field(default_factory=list)

    def table(self) -> str:
        rows = [
            ("jobs", str(self.jobs)),
            ("peak in flight", str(self.peak_in_flight)),
            ("ended", ", ".join(f"{k} {v}" for k, v in sorted(self.states.items()))),
            ("finalized (must equal jobs)", str(self.finalized)),
            ("lost", str(len(self.lost))),
            ("stages run twice at once", str(len(self.overlaps))),
            ("cut-off stages run past their lease", str(len(self.past_lease))),
            *(("past its lease", x) for x in self.past_lease[:3]),
            (
                "sandboxes left (dirs / processes)",
                f"{sum(map(len, self.sandboxes_left.values()))} / {len(self.sandbox_processes_left)}",
            ),
            ("API probes (failed from the first fault on)", f"{self.api_probes} ({len(self.api_failures)})"),
            *(("API failure", failure[:100]) for failure in self.api_failures[:3]),
            ("API latency p99 / max", f"{self.api_p99_ms:.0f} ms / {self.api_max_ms:.0f} ms"),
            *((name, f"{value:.1f} s") for name, value in self.times.items()),
            *(("note", note) for note in self.notes),
        ]
        width = max(len(k) for k, _ in rows)
        return "\n".join(f"{k:<{width}}  {v}" for k, v in rows)

    @property
    def ok(self) -> bool:
        return (
            not self.lost
            and self.finalized == self.jobs
            and not self.overlaps
            and not self.past_lease
            and not any(self.sandboxes_left.values())
            and not self.sandbox_processes_left
            and not self.api_failures
        )


class _Watch:
    """Calls `_probe` every `interval` seconds from a thread, from `with` to its end."""

    interval = 0.5

    def __init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> Self:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        while not self._stop.wait(self.interval):
            self._probe()

    def _probe(self) -> None:
        raise NotImplementedError


class ApiWatch(_Watch):
    """GET /healthz every 0.2 s from a thread; records failures and latencies."""

    interval = 0.2

    def __init__(self, url: str) -> None:
        super().__init__()
        self.latencies: list[float] = []
        self.failures: list[tuple[float, str]] = []
        """(monotonic time, what went wrong)"""
        self._client = httpx.Client(base_url=url, timeout=10)  # a probe that waits 10 s has failed

    def __exit__(self, *exc: object) -> None:
        super().__exit__(*exc)
        self._client.close()

    def _probe(self) -> None:
        started = time.monotonic()
        try:
            response = self._client.get("/healthz")
            if response.status_code != 200:
                self.failures.append((started, f"{response.status_code} {response.text[:200]}"))
        except httpx.HTTPError as exc:
            self.failures.append((started, repr(exc)))
        self.latencies.append(time.monotonic() - started)


def _tasks(rng: random.Random, sizes: Sizes) -> list[dict[str, Any]]:
    """The batch as tasks of the task API (one request creates `per_task` sessions): one in
    `math_every` tasks a math rollout with a sandbox, the others probe jobs of their own run time."""
    bodies = []
    for i in range(sizes.jobs // sizes.per_task):
        run_s = rng.uniform(*sizes.long_run_s) if i % sizes.long_every == 0 else rng.uniform(*sizes.run_s)
        instance: dict[str, Any] = {"handler": "probe", "run_s": round(run_s, 2)}
        if sizes.math_every and i % sizes.math_every == sizes.math_every - 1:
            instance = {"handler": "math", "question": "What is 84 * 76 + 123?", "answer": "6507"}
        task_id = f"t{i:04d}-{rng.getrandbits(32):08x}"
        bodies.append({"task_id": task_id, "instance": instance, "num_samples": sizes.per_task})
    return bodies


def _submit_all(api: httpx.Client, sizes: Sizes, rng: random.Random) -> list[str]:
    def submit(body: dict[str, Any]) -> list[str]:
        response = api.post("/rollout/task/submit", json=body)
        assert response.status_code == 200, response.text
        return list(response.json()["session_ids"])

    with ThreadPoolExecutor(4) as pool:
        return [job for ids in pool.map(submit, _tasks(rng, sizes)) for job in ids]


class SandboxWatch(_Watch):
    """Counts each node's sandbox directories every 0.5 s from a thread: (time, node, count) rows."""

    def __init__(self, farm: NetFarm) -> None:
        super().__init__()
        self.farm = farm
        self.rows: list[tuple[float, str, int]] = []

    def _probe(self) -> None:
        for node in self.farm.nodes:
            count = len(_sandbox_dirs(self.farm.sandboxes_dir(node.name)))
            self.rows.append((time.monotonic(), node.name, count))

    def empty_since(self, node: str, after: float) -> float | None:
        """When the node's count first read 0 at or after `after` (and stayed 0 to the last reading)."""
        since = None
        for t, name, count in self.rows:
            if name != node or t < after:
                continue
            if count == 0 and since is None:
                since = t
            elif count:
                since = None
        return since


def _overlaps(attempts: dict[str, dict[str, Any]], killed_at: dict[str, float], now: float) -> list[str]:
    """(job, stage) pairs two of whose attempts were running at the same moment."""
    spans: dict[tuple[str, str], list[tuple[float, float, str]]] = {}
    for attempt, a in attempts.items():
        if "start" not in a:
            continue
        end = a["end"] if a["end"] is not None else killed_at.get(a["node"], now)
        spans.setdefault((a["job"], a["stage"]), []).append((a["start"], end, f"{a['node']}:{attempt}"))
    found = []
    for (job, stage), runs in spans.items():
        runs.sort()
        for (s1, e1, who1), (s2, e2, who2) in itertools.pairwise(runs):
            if s2 < e1:
                found.append(f"{job} {stage}: {who1} [{s1:.2f}, {e1:.2f}] and {who2} [{s2:.2f}, {e2:.2f}]")
    return found


def _past_lease(attempts: dict[str, dict[str, Any]], node: str, cut_at: float) -> list[str]:
    """Attempts on a node cut off at `cut_at` that were still running when their lease could have
    expired in Redis (its last renewal was sent before the cut): from then the reaper may hand the stage
    to another node, whatever spare capacity there is to start it at once."""
    limit = cut_at + LEASE_TTL_S
    return [
        f"{a['job']} {a['stage']} on {node}: ran until {a['end'] - cut_at:.1f} s after the cut"
        for a in attempts.values()
        if a["node"] == node and a.get("start", 1e18) < cut_at and (a["end"] or 1e18) > limit
    ]


def _takeover_s(attempts: dict[str, dict[str, Any]], node: str, fault_at: float) -> list[float]:
    """For each stage `node` was running when the fault struck: how long until another attempt of it
    began elsewhere (stages that simply ended on `node` before anyone took them over are left out)."""
    held = [
        a
        for a in attempts.values()
        if a["node"] == node
        and a.get("start", 1e18) <= fault_at
        and (a["end"] is None or a["end"] > fault_at)
    ]
    delays = []
    for a in held:
        later = [
            b["start"]
            for b in attempts.values()
            if b["job"] == a["job"]
            and b["stage"] == a["stage"]
            and b["node"] != node
            and b.get("start", 0) > fault_at
        ]
        if later:
            delays.append(min(later) - fault_at)
    return delays


def _sandbox_processes(farm: NetFarm) -> list[int]:
    """Processes whose command line names a sandbox directory of one of the farm's nodes."""
    roots = [str(farm.sandboxes_dir(n.name)) for n in farm.nodes]
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        cmdline = " ".join(proc.info["cmdline"] or [])
        if any(root in cmdline for root in roots):
            found.append(proc.pid)
    return found


def _sandbox_dirs(path: Path) -> list[str]:
    if not path.exists():
        return []
    return [d.name for d in path.iterdir() if d.is_dir() and not d.name.startswith(".")]


def run(farm: NetFarm, sizes: Sizes, seed: int = 29, log: Any = print) -> Outcome:
    """The scenario on a started farm of three nodes (its first three are A, B and C)."""
    a, b, c = (n.name for n in farm.nodes[:3])
    rng = random.Random(seed)
    out = Outcome(jobs=sizes.jobs)
    api = httpx.Client(base_url=farm.api_url, timeout=30)
    with ApiWatch(farm.api_url) as watch, SandboxWatch(farm) as boxes:
        t0 = time.monotonic()
        jobs = _submit_all(api, sizes, rng)
        log(f"submitted {len(jobs)} jobs in {time.monotonic() - t0:.1f} s")
        status = poll(
            lambda: api.get("/status").json(), 60, accept=lambda s: s["active_jobs"] >= sizes.min_in_flight
        )
        out.peak_in_flight = status["active_jobs"]
        if watch.failures:  # the submission burst on a loaded machine, not a fault: reported, not counted
            out.notes.append(
                f"API probes failed during the submission burst: {[w for _, w in watch.failures[:3]]}"
            )
        if out.peak_in_flight < sizes.min_in_flight:
            out.notes.append(f"only {out.peak_in_flight} in flight when the faults began")

        fault_at = time.monotonic()
        farm.lab.cut(a)
        how = farm.lab.degrade(b, delay_ms=50, jitter_ms=20, loss_pct=5.0, rate_kbit=4000)
        out.notes.append(f"{b} degraded: {how}")
        log(f"{a} cut, {b} degraded, {out.peak_in_flight} jobs in flight")
        time.sleep(sizes.kill_after_s)  # the scenario's schedule, not a wait for a condition
        farm.kill_node(c)
        kill_at = time.monotonic()
        log(f"{c} killed")
        time.sleep(max(0.0, fault_at + sizes.cut_s - time.monotonic()))
        farm.lab.heal(a)
        heal_at = time.monotonic()
        log(f"{a} healed after {heal_at - fault_at:.1f} s")
        time.sleep(max(0.0, fault_at + sizes.degrade_s - time.monotonic()))
        farm.lab.restore(b)
        log(f"{b} restored")

        def active() -> int:
            return int(api.get("/status").json()["active_jobs"])

        left = poll(active, sizes.end_within_s, accept=lambda n: n == 0, interval_s=0.5)
        ended_at = time.monotonic()
        out.times["all jobs ended, after the first fault"] = ended_at - fault_at
        results = {}
        for job_id in jobs:
            body = api.get(f"/jobs/{job_id}").json()
            results[job_id] = body
        out.states = Counter(r["state"] for r in results.values())
        out.lost = [j for j, r in results.items() if r["state"] not in TERMINAL]
        counts = api.get("/status").json()["jobs"]
        out.finalized = sum(n for state, n in counts.items() if state in TERMINAL)
        if left:
            out.notes.append(f"{left} jobs still active after {sizes.end_within_s:.0f} s")
        failed = Counter(
            (r.get("error") or {}).get("type", "?") for r in results.values() if r["state"] == "failed"
        )
        if failed:
            out.notes.append("failed: " + ", ".join(f"{k} {v}" for k, v in failed.items()))
            messages = {
                (r.get("error") or {}).get("message", "")[:160]
                for r in results.values()
                if r["state"] == "failed"
            }
            out.notes.extend(sorted(messages)[:3])

        reboot_at = time.monotonic()
        farm.restart_node(c)
        boot_at = time.monotonic()
        out.times[f"{c} rebooted, workers live"] = boot_at - reboot_at
        for node in (a, c):
            out.sandboxes_left[node] = poll(
                lambda n=node: _sandbox_dirs(farm.sandboxes_dir(n)),
                40,
                accept=lambda d: d == [],
                interval_s=0.5,
            )
        time.sleep(1.0)  # one more reading of the sandbox watch
        for node, since, what in ((a, ended_at, "the last job ended"), (c, boot_at, "its workers came back")):
            empty = boxes.empty_since(node, since)
            if empty is not None:
                out.times[f"{node} holds no sandbox, after {what}"] = max(0.0, empty - since)
        out.sandboxes_left[b] = _sandbox_dirs(farm.sandboxes_dir(b))
        out.sandbox_processes_left = poll(lambda: _sandbox_processes(farm), 20, accept=lambda p: p == [])

        attempts = read_attempts([farm.workdir(n.name) for n in farm.nodes])
        out.overlaps = _overlaps(attempts, {c: kill_at}, time.monotonic())
        out.past_lease = _past_lease(attempts, a, fault_at)
        back = [x["start"] for x in attempts.values() if x["node"] == a and x.get("start", 0) > heal_at]
        if back:
            out.times[f"{a} begins a stage again, after the heal"] = min(back) - heal_at
        for node, at, what in ((a, fault_at, "cut"), (c, kill_at, "kill")):
            delays = _takeover_s(attempts, node, at)
            if delays:
                out.times[f"{node} {what}: its stages begun elsewhere, p50"] = statistics.median(delays)
                out.times[f"{node} {what}: its stages begun elsewhere, max"] = max(delays)
    api.close()
    out.api_probes = len(watch.latencies)
    out.api_failures = [what for at, what in watch.failures if at >= fault_at]
    if watch.latencies:
        ordered = sorted(watch.latencies)
        out.api_p99_ms = ordered[int(0.99 * (len(ordered) - 1))] * 1000
        out.api_max_ms = ordered[-1] * 1000
    return out
