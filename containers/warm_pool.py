"""A warm pool of local sandboxes: per sandbox spec, sandboxes started ahead and waiting to be claimed.

One pool per process (the farm's init worker owns it; `install` makes it the process's pool). A claim
takes a sandbox out under the pool's lock, so no two claimers ever get the same one, and hands it over
exactly as a cold start would have: its claim (the claimer's labels and start time, in a file beside
its handle that the orphan sweep reads, created with O_EXCL) is recorded before the claim returns, and
its execution server is sent the claimer's TTL by the pool's next `settle` (the farm's keeper and fillers
call it every 0.2 to 0.5 s between their other work, tasks/warm.py; until then the pooled TTL, the idle
bound plus a margin, stands).
Nothing ever ran in it (the workspace is as `start` made it) and it is never pooled again: stopping is
the only way out.

Ownership, for leaks: a pooled sandbox is labelled with its owner (pid and start time of the owning
process). While the owner lives, only it stops or hands out its sandboxes; once it is gone, the orphan
sweep stops every sandbox still labelled with it (`owner_alive`). Its execution server's TTL (the idle
bound plus a margin) ends it too, should no sweep ever run on the node.

Which specs are pooled is learnt from claims: a spec (labels and TTL aside) claimed twice within the
idle bound gets a pool, sized by `set_budget` (the farm sizes it from the init queue and the READY
buffer); a sandbox pooled longer than the idle bound is stopped, and a spec not claimed for as long is
forgotten.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections import deque
from dataclasses import dataclass, field

from containers import procs
from containers.errors import ExecServerError
from containers.exec_client import ExecClient
from containers.handle import SandboxHandle
from containers.local import LocalRuntime, record_claim
from containers.sandbox import Sandbox
from containers.spec import SandboxSpec

log = logging.getLogger(__name__)

OWNER_LABEL = "warm_pool_owner"
"""Label of a pooled, unclaimed sandbox: `pid:start_ticks` of the process whose pool holds it."""
TTL_MARGIN_S = 60.0
"""A pooled sandbox's own TTL is the idle bound plus this (the owner stops it at the idle bound)."""
DEMAND_TO_POOL = 2
"""Claims of one spec within the idle bound before it gets a pool (a spec seen once, e.g. one carrying
an instance's own binds, is not worth sandboxes kept waiting)."""


def pool_key(spec: SandboxSpec) -> str:
    """What makes two specs' sandboxes interchangeable: everything but the labels and the TTL, which a
    claim sets."""
    bare = spec.model_copy(update={"labels": {}, "ttl_s": None})
    return json.dumps(bare.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))


def owner_token(pid: int | None = None) -> str:
    pid = os.getpid() if pid is None else pid
    return f"{pid}:{procs.start_ticks(pid)}"


def owner_alive(token: str) -> bool:
    """Whether the process named by an OWNER_LABEL value still runs (a recycled pid does not count)."""
    pid, _, ticks = token.partition(":")
    try:
        return procs.is_same_process(int(pid), int(ticks))
    except ValueError:
        return False


@dataclass
class _Pooled:
    sandbox: Sandbox
    pooled_at: float


@dataclass
class _Demand:
    spec: SandboxSpec
    claims: int = 0
    last: float = 0.0
    ready: deque[_Pooled] = field(default_factory=deque)
    starting: int = 0


class PoolStats:
    """Counters since the pool started; `ready` and `starting` are now."""

    def __init__(self) -> None:
        self.hits = self.misses = self.started = self.expired = self.failed = 0

    def as_dict(self, ready: int, starting: int, specs: int) -> dict[str, int]:
        return {
            "ready": ready,
            "starting": starting,
            "specs": specs,
            "hits": self.hits,
            "misses": self.misses,
            "started": self.started,
            "expired": self.expired,
            "failed": self.failed,
        }


class WarmPool:
    """Pooled sandboxes of one local runtime, per spec; thread-safe. `fill` and `stop_idle` are called by
    the owner's keeper (the farm: tasks/warm.py), `claim` by whoever starts sandboxes."""

    def __init__(self, runtime: LocalRuntime, idle_s: float, shared_labels: tuple[str, ...] = ()) -> None:
        self.runtime = runtime
        self.idle_s = idle_s
        self.shared_labels = shared_labels
        """Labels a pooled sandbox keeps from the spec it was pooled for (e.g. the farm's id, which the
        orphan sweep reads): the job's own labels come with the claim."""
        self.owner = owner_token()
        self.budget = 0
        self.stats = PoolStats()
        self._demand: dict[str, _Demand] = {}
        self._lock = threading.Lock()
        self._closed = False
        self._unsettled: list[tuple[SandboxHandle, ExecClient, float | None]] = []
        """Claimed sandboxes whose server is still to be sent the claimer's TTL, with their connection."""

    def claim(self, spec: SandboxSpec) -> Sandbox | None:
        """A pooled sandbox for `spec`, handed over as if just started for it; None when none is ready
        (the caller starts one cold). Records the demand the pool is sized from either way."""
        key, now = pool_key(spec), time.monotonic()
        while True:
            with self._lock:  # one critical section per sandbox taken: the demand, the pop, the count
                demand = self._demand.setdefault(key, _Demand(spec))
                if demand.last != now:  # (a retry after a failed hand-over is the same claim)
                    # quiet for longer than the idle bound: the demand is learnt again from scratch
                    demand.claims = demand.claims + 1 if now - demand.last <= self.idle_s else 1
                    demand.last = now
                pooled = demand.ready.popleft() if demand.ready else None
                if pooled is None:
                    self.stats.misses += 1
                    return None
                self.stats.hits += 1
            sandbox = self._hand_over(pooled.sandbox, spec)
            if sandbox is not None:
                return sandbox

    def _hand_over(self, pooled: Sandbox, spec: SandboxSpec) -> Sandbox | None:
        """Relabels the sandbox as the claimer's (its claim file: from then on the orphan sweep judges it
        by the claimer's labels); its TTL is left to `settle`. The claim waits for no other process and
        wakes none: a few system calls of its own."""
        now = time.time()
        handle = pooled.info.model_copy(
            update={
                "labels": dict(spec.labels),
                "created_at": now,
                "expires_at": now + spec.ttl_s if spec.ttl_s else None,
            }
        )
        if pooled.client.lost():  # a server that died while pooled closed the connection
            self._failed(pooled, handle, "its execution server closed the connection")
            return None
        if not record_claim(handle):  # claimed already: not this claimer's, and not to be stopped
            log.error("pooled sandbox %s was claimed twice; skipped", handle.id)
            pooled.client.close()
            with self._lock:
                self.stats.hits -= 1
            return None
        with self._lock:
            self._unsettled.append((handle, pooled.client, spec.ttl_s))
        return Sandbox(handle, self.runtime)

    def settle(self) -> int:
        """Sends each sandbox claimed since the last call its claimer's TTL, reads the answer and closes
        that connection (the keeper calls it, and `fill`, `stop_idle` and `close` do); returns how many."""
        with self._lock:
            pending, self._unsettled = self._unsettled, []
        for handle, client, ttl_s in pending:
            try:
                client.call("ttl", {"seconds": ttl_s}, timeout=5.0)
            except ExecServerError as exc:
                if os.path.isdir(handle.sandbox_dir):  # else its job has stopped it already: no TTL to set
                    log.warning("sandbox %s claimed from the pool did not take its TTL: %s", handle.id, exc)
            finally:
                client.close()
        return len(pending)

    def _failed(self, pooled: Sandbox, handle: SandboxHandle, why: str) -> None:
        log.warning("pooled sandbox %s could not be claimed: %s", handle.id, why)
        pooled.client.close()
        with self._lock:
            self.stats.failed += 1
            self.stats.hits -= 1
        self._stop(Sandbox(handle, self.runtime))

    def set_budget(self, sandboxes: int) -> None:
        """How many sandboxes the pool may hold (ready or starting), over every spec it serves."""
        self.budget = max(0, sandboxes)

    def fill(self) -> bool:
        """Starts one sandbox for the spec furthest below its share of the budget; False when none is
        (or the start failed)."""
        self.settle()
        with self._lock:
            demand = None if self._closed else self._neediest(time.monotonic())
            if demand is None:
                return False
            demand.starting += 1
        sandbox = self._start(demand.spec)
        if sandbox is None:
            with self._lock:
                demand.starting -= 1
            return False
        with self._lock:
            demand.starting -= 1
            kept = not self._closed and self._demand.get(pool_key(demand.spec)) is demand
            if kept:
                demand.ready.append(_Pooled(sandbox, time.monotonic()))
                self.stats.started += 1
        if not kept:
            self._stop(sandbox)
        return kept

    def _start(self, spec: SandboxSpec) -> Sandbox | None:
        try:
            sandbox = self.runtime.start(self._pooled_spec(spec))
        except Exception:
            log.exception("could not start a pooled sandbox")
            with self._lock:
                self.stats.failed += 1
            return None
        try:  # connected now, so that a claim costs one round trip on an open connection
            sandbox.client.call("ping", timeout=5.0)
        except ExecServerError:
            log.exception("pooled sandbox %s did not answer", sandbox.id)
            with self._lock:
                self.stats.failed += 1
            self._stop(sandbox)
            return None
        return sandbox

    def _pooled_spec(self, spec: SandboxSpec) -> SandboxSpec:
        labels = {k: v for k, v in spec.labels.items() if k in self.shared_labels}
        labels[OWNER_LABEL] = self.owner
        return spec.model_copy(update={"labels": labels, "ttl_s": self.idle_s + TTL_MARGIN_S})

    def _neediest(self, now: float) -> _Demand | None:
        active = [
            d for d in self._demand.values() if d.claims >= DEMAND_TO_POOL and now - d.last <= self.idle_s
        ]
        held = sum(len(d.ready) + d.starting for d in self._demand.values())
        if not active or held >= self.budget:
            return None
        claims = sum(d.claims for d in active)

        def deficit(d: _Demand) -> float:
            return self.budget * d.claims / claims - (len(d.ready) + d.starting)

        best = max(active, key=deficit)
        return best if deficit(best) > 0 else None

    def stop_idle(self) -> int:
        """Stops sandboxes pooled longer than the idle bound and forgets specs not claimed for as long;
        returns how many sandboxes it stopped."""
        self.settle()
        now = time.monotonic()
        stale: list[Sandbox] = []
        with self._lock:
            for key, demand in list(self._demand.items()):
                while demand.ready and now - demand.ready[0].pooled_at > self.idle_s:
                    stale.append(demand.ready.popleft().sandbox)
                if not demand.ready and not demand.starting and now - demand.last > self.idle_s:
                    del self._demand[key]
            self.stats.expired += len(stale)
        for sandbox in stale:
            self._stop(sandbox)
        return len(stale)

    def trim(self) -> int:
        """Stops the newest pooled sandboxes beyond the budget (it shrank: the queue emptied, the READY
        buffer filled); returns how many."""
        surplus: list[Sandbox] = []
        with self._lock:
            held = sum(len(d.ready) + d.starting for d in self._demand.values())
            for demand in sorted(self._demand.values(), key=lambda d: d.claims):
                while held > self.budget and demand.ready:
                    surplus.append(demand.ready.pop().sandbox)
                    held -= 1
        for sandbox in surplus:
            self._stop(sandbox)
        return len(surplus)

    def counts(self) -> dict[str, int]:
        with self._lock:
            ready = sum(len(d.ready) for d in self._demand.values())
            starting = sum(d.starting for d in self._demand.values())
            specs = len(self._demand)
        return self.stats.as_dict(ready, starting, specs)

    def pooled_ids(self) -> list[str]:
        with self._lock:
            return [p.sandbox.id for d in self._demand.values() for p in d.ready]

    def close(self) -> None:
        """Stops every pooled sandbox; the pool starts none afterwards (one still starting is stopped
        when its start returns)."""
        self.settle()
        with self._lock:
            self._closed = True
            held = [p.sandbox for d in self._demand.values() for p in d.ready]
            for demand in self._demand.values():
                demand.ready.clear()
        for sandbox in held:
            self._stop(sandbox)

    @staticmethod
    def _stop(sandbox: Sandbox) -> None:
        try:
            sandbox.stop()
        except Exception:
            log.exception("could not stop pooled sandbox %s", sandbox.id)


_installed: WarmPool | None = None


def install(pool: WarmPool | None) -> None:
    """Makes `pool` this process's pool (None: none), the one `installed` returns to sandbox starters."""
    global _installed
    _installed = pool


def installed() -> WarmPool | None:
    return _installed
