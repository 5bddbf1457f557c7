"""A whole farm (API, one Celery worker per stage queue) whose state lives on a real local Redis Cluster
(three masters, FARM_REDIS_URL=redis+cluster://...) with the Celery broker on a plain Redis
(FARM_BROKER_URL). The job scripts run on the cluster (each job's keys share its bucket's hash tag);
the stage messages go to the broker after them."""

from __future__ import annotations

import json
import signal
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import httpx
import pytest
import redis

from farm import keys
from farm.embedded_redis import EmbeddedRedis
from farm.launcher import LocalFarm, WorkerSpec
from tests.core.redis_cluster import LocalCluster, missing_binaries

pytestmark = [
    pytest.mark.slow,
    pytest.mark.integration,
    pytest.mark.skipif(missing_binaries() is not None, reason=str(missing_binaries())),
]
CLUSTER = keys.Layout(keys.CLUSTER_BUCKETS)
"""Where the farm's processes put jobs (this test process reads the default, plain layout)."""


@pytest.fixture(scope="module")
def cluster_farm() -> Iterator[LocalFarm]:
    cluster = LocalCluster().start()
    broker = EmbeddedRedis().start()
    logs = Path(tempfile.mkdtemp(prefix="farm-cluster-logs-"))
    farm = LocalFarm(
        redis_url=f"redis+cluster://127.0.0.1:{cluster.ports[0]}",
        workers=[
            WorkerSpec("init", concurrency=2),
            WorkerSpec("run", concurrency=4),
            WorkerSpec("run", concurrency=4),  # one is killed
            WorkerSpec("eval", concurrency=2),
        ],
        env={"FARM_BROKER_URL": broker.url, "FARM_WORKDIR": str(logs / "work")},
        log_dir=logs,
    )
    try:
        farm.start(timeout_s=90)
        yield farm
    finally:
        farm.stop()
        broker.stop()
        cluster.stop()


def test_rollouts_run_on_a_redis_cluster(cluster_farm: LocalFarm) -> None:
    with httpx.Client(base_url=cluster_farm.api_url, timeout=60) as api:

        def process(n: int) -> str:
            body = {"instance": {"handler": "noop", "run_s": 0.05 * (n % 3)}, "job_id": uuid.uuid4().hex}
            answer = api.post("/process", json=body)
            answer.raise_for_status()
            return str(answer.json()["state"])

        with ThreadPoolExecutor(8) as pool:
            states = list(pool.map(process, range(24)))
        assert states == ["done"] * 24
        status = api.get("/status").json()
        assert status["jobs"] == {"done": 24} and status["active_jobs"] == 0
        assert {w["queues"][0] for w in status["workers"]} == {"init", "run", "eval"}
        metrics = api.get("/metrics").text
        assert 'farm_jobs_finished_total{state="done"} 24.0' in metrics
        page = api.get("/ui/api/jobs", params={"limit": 50}).json()  # rows read bucket by bucket
        assert len(page["rows"]) == 24 and {row["state"] for row in page["rows"]} == {"done"}


def test_a_task_runs_on_a_redis_cluster(cluster_farm: LocalFarm) -> None:
    task = {"task_id": "t-cluster", "instruction": "x", "num_samples": 4, "agent": {"handler": "noop"}}
    with httpx.Client(base_url=cluster_farm.api_url, timeout=60) as api:
        api.post("/rollout/task/submit", json=task).raise_for_status()
        deadline = time.monotonic() + 30
        while (status := api.get("/rollout/task/t-cluster").json())["state"] != "completed":
            assert time.monotonic() < deadline, status
            time.sleep(0.1)
        assert len(status["sessions"]) == 4


def test_a_killed_stage_is_resumed_on_a_redis_cluster(cluster_farm: LocalFarm) -> None:
    """The reaper finds the expired lease in the job's bucket on the cluster and re-sends the stage
    through the broker; the surviving run worker finishes the job."""
    job_id = uuid.uuid4().hex
    with httpx.Client(base_url=cluster_farm.api_url, timeout=60) as api:
        body = {"instance": {"handler": "noop", "run_s": 3}, "job_id": job_id, "wait": False}
        api.post("/process", json=body).raise_for_status()
        state = _await(api, job_id, {"run"}, 15)
        owner = redis.RedisCluster.from_url(_node(cluster_farm), decode_responses=True)
        try:
            holder = owner.hget(CLUSTER.job(job_id), "lease_owner") or ""
            victim = "worker-" + holder.split("@")[0].rsplit("-", 2)[0]
            cluster_farm.kill(victim, signal.SIGKILL)
            state = _await(api, job_id, {"done", "failed"}, 40)
            assert state == "done"
            assert owner.hget(CLUSTER.job(job_id), "infra_retries") == "1"
        finally:
            owner.close()
            cluster_farm.respawn(victim)


def _node(farm: LocalFarm) -> str:
    return (farm.redis_url or "").replace("redis+cluster://", "redis://")


def _await(api: httpx.Client, job_id: str, states: set[str], timeout_s: float) -> str:
    deadline = time.monotonic() + timeout_s
    while (state := str(api.get(f"/jobs/{job_id}").json()["state"])) not in states:
        assert time.monotonic() < deadline, state
        time.sleep(0.05)
    return state


class _Receiver(BaseHTTPRequestHandler):
    seen: ClassVar[list[dict[str, object]]] = []

    def do_POST(self) -> None:
        _Receiver.seen.append(json.loads(self.rfile.read(int(self.headers["content-length"]))))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


def test_a_callback_is_delivered_from_a_cluster_bucket(cluster_farm: LocalFarm) -> None:
    """The job's end wakes the callback sender with its id, which claims from that job's bucket."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}/results"
        with httpx.Client(base_url=cluster_farm.api_url, timeout=60) as api:
            ids = [uuid.uuid4().hex for _ in range(6)]  # over several buckets
            for job_id in ids:
                body = {"instance": {"handler": "noop"}, "job_id": job_id, "callback_url": url}
                assert api.post("/process", json=body).json()["state"] == "done"
        deadline = time.monotonic() + 3  # well within the idle poll's round of every bucket (20 s)
        while len(_Receiver.seen) < len(ids):
            assert time.monotonic() < deadline, f"{len(_Receiver.seen)} of {len(ids)} delivered"
            time.sleep(0.05)
        assert sorted(str(b["job_id"]) for b in _Receiver.seen) == sorted(ids)
    finally:
        server.shutdown()
