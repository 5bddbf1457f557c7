"""Chaos, bounded and on loopback only: 200 jobs while workers are SIGKILLed and respawned at random,
a tenth of the jobs are cancelled, and one registered backend is dead. Every job must end in exactly
one terminal state, none lost, none finalized twice, and no worker process may outlive the farm.

Three jobs in four are noop jobs that make one real generation (so the dead backend matters) and
hold their run stage for up to a second; the fourth is a math rollout with a sandbox, so killed
init and run stages leave sandboxes behind, which the orphan sweep must stop: none may remain.

`pytest -s tests/integration/test_chaos.py` prints its counts; FARM_CHAOS=0 skips it."""

from __future__ import annotations

import os
import random
import signal
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import httpx
import psutil
import pytest
import redis

from farm import keys
from farm.embedded_redis import EmbeddedRedis, free_port
from farm.jobs.store import JobStore
from farm.launcher import LocalFarm, WorkerSpec
from farm.models.results import JobResult, JobState
from tests.integration.jobs import submit
from tests.waiting import poll

pytestmark = [
    pytest.mark.integration,
    pytest.mark.slow,
    pytest.mark.skipif(os.environ.get("FARM_CHAOS") == "0", reason="FARM_CHAOS=0"),
]

JOBS = 200
CHAOS_S = 30.0


def test_chaos_every_job_ends_exactly_once() -> None:
    rng = random.Random(20261122)
    logs = Path(tempfile.mkdtemp(prefix="farm-chaos-"))
    server = EmbeddedRedis().start()
    workers = [
        WorkerSpec("init", concurrency=4),
        WorkerSpec("run", concurrency=8),
        WorkerSpec("run", concurrency=8),
        WorkerSpec("eval", concurrency=4),
        WorkerSpec("init,eval", concurrency=4),
    ]
    farm = LocalFarm(
        redis_url=server.url,
        workers=workers,
        llm_servers=2,
        log_dir=logs,
        env={
            "FARM_WORKDIR": str(logs / "work"),
            "FARM_STALL_GRACE_S": "5",
            "FARM_ORPHAN_GRACE_S": "2",
        },
    )
    counts: Counter[str] = Counter()
    try:
        farm.start(timeout_s=90)
        api = httpx.Client(base_url=farm.api_url, timeout=30)
        api.post("/add_llm_server", json={"address": f"http://127.0.0.1:{free_port()}/v1"}).raise_for_status()

        stop = threading.Event()

        def chaos() -> None:
            while not stop.wait(rng.uniform(1.5, 3.0)):
                victim = rng.choice(farm.worker_names())
                farm.kill(victim, signal.SIGKILL)
                counts["workers killed"] += 1
                farm.respawn(victim)

        killer = threading.Thread(target=chaos, daemon=True)
        killer.start()
        jobs: list[str] = []
        cancelled: set[str] = set()
        started = time.monotonic()
        for i in range(JOBS):
            instance = {"handler": "noop", "generate_tokens": 4, "run_s": rng.uniform(0.0, 1.0)}
            if i % 4 == 3:
                instance = {"handler": "math", "question": "What is 84 * 76 + 123?", "answer": "6507"}
            jobs.append(submit(api, instance, timeout_s=120))
            if rng.random() < 0.1 and i > 5:
                target = rng.choice(jobs[-5:])
                api.post("/cancel", json={"job_id": target}).raise_for_status()
                cancelled.add(target)
            # the scenario's pace, not a wait: submissions spread over 80 % of the chaos window
            time.sleep(max(0.0, (CHAOS_S * 0.8) * (i + 1) / JOBS - (time.monotonic() - started)))
        stop.wait(max(0.0, CHAOS_S - (time.monotonic() - started)))  # the chaos lasts CHAOS_S
        stop.set()
        killer.join()

        results: dict[str, JobResult] = {}

        def ended() -> int:
            for job_id in jobs:
                if job_id not in results:
                    result = JobResult.model_validate(api.get(f"/jobs/{job_id}").json())
                    if result.state.terminal:
                        results[job_id] = result
            return len(results)

        poll(ended, 120, accept=lambda n: n == len(jobs), interval_s=0.5)  # the lost are reported below
        lost = [job_id for job_id in jobs if job_id not in results]

        client = redis.Redis.from_url(server.url, decode_responses=True)
        by_state = JobStore(client, 60).counts_by_state()
        finalized = sum(n for state, n in by_state.items() if JobState(state).terminal)
        retries = sum(int(client.hget(keys.job(j), "infra_retries") or 0) for j in jobs)
        stuck = {
            j: {k: v for k, v in client.hgetall(keys.job(j)).items() if k not in ("spec", "result")}
            for j in lost
        }
        client.close()
        states = Counter(r.state.value for r in results.values())
        counts.update({f"ended {state}": n for state, n in states.items()})
        counts.update(
            {
                "jobs": len(jobs),
                "cancel asked": len(cancelled),
                "lost": len(lost),
                "finalized": finalized,
                "infra retries": retries,
            }
        )
        sandboxes = logs / "work" / "sandboxes"
        left = poll(  # the sweep runs every 10 s per host; orphans are older than 2 s
            lambda: [d for d in sandboxes.glob("*") if d.is_dir() and not d.name.startswith(".")],
            30,
            accept=lambda found: found == [],
            interval_s=0.5,
        )
        counts["sandboxes left"] = len(left)
        print("\nchaos counts: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))

        if stuck:
            (logs / "stuck.json").write_text(__import__("json").dumps(stuck, indent=1))
        assert lost == [], f"{len(lost)} jobs never ended; their records are in {logs / 'stuck.json'}"
        assert left == [], f"sandboxes nobody stopped: {left}"
        assert finalized == len(jobs)  # each job finalized once, never twice
        assert {r.job_id for r in results.values()} == set(jobs)
        assert states["done"] + states["cancelled"] + states["failed"] == len(jobs)
        for job_id, result in results.items():
            if result.state.value == "cancelled":
                assert job_id in cancelled
            if result.state.value == "failed":  # only an exhausted infrastructure retry budget
                assert result.error is not None and result.error.type == "WorkerLost", result.error
        api.close()
    finally:
        children = [psutil.Process(p.pid) for _, p in farm.children() if p.poll() is None]
        descendants = [d for c in children for d in c.children(recursive=True)] + children
        farm.stop()
        server.stop()
    _, alive = psutil.wait_procs(descendants, timeout=10)
    assert alive == [], f"orphaned processes: {alive}"
