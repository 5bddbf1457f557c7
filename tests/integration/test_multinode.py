"""Two worker sets with distinct node names behave like two nodes: the run stage of a sandboxed job
runs on the node that initialised it, and work spreads over both."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import httpx
import pytest
import redis

from farm import keys
from farm.launcher import LocalFarm, WorkerSpec
from farm.models.results import JobState
from tests.farms import temp_farm
from tests.integration.jobs import submit, wait_state

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # its own three-node farm: the CI slow step


@pytest.fixture(scope="module")
def two_nodes() -> Iterator[LocalFarm]:
    workers = [
        WorkerSpec("init", concurrency=2, node="node-a", name="a-init"),
        WorkerSpec("run", concurrency=4, node="node-a", name="a-run"),
        WorkerSpec("init", concurrency=2, node="node-b", name="b-init"),
        WorkerSpec("run", concurrency=4, node="node-b", name="b-run"),
        WorkerSpec("eval", concurrency=4),
    ]
    farm = temp_farm("farm-nodes-", workers=workers, llm_args=["--token-latency-ms", "2"])
    with farm.start(timeout_s=90):
        yield farm


def test_run_stays_on_the_init_node_and_work_spreads(two_nodes: LocalFarm) -> None:
    instance = {"handler": "math", "question": "What is 84 * 76 + 123?", "answer": "6507"}
    with httpx.Client(base_url=two_nodes.api_url, timeout=60) as api:
        queues = {q for w in api.get("/status").json()["workers"] for q in w["queues"]}
        assert {"run.node-a", "run.node-b"} <= queues
        jobs = [submit(api, instance, sampling_params={"max_tokens": 256}) for _ in range(16)]
        results = [wait_state(api, job_id, {"done", "failed", "timeout", "cancelled"}, 60) for job_id in jobs]
    assert [r.state for r in results] == [JobState.done] * len(jobs), [r.error for r in results]
    client = redis.Redis.from_url(two_nodes.redis_url, decode_responses=True)
    placed = [client.hmget(keys.job(job_id), "node", "run_node") for job_id in jobs]
    client.close()
    assert all(init == run for init, run in placed), placed
    assert set(Counter(init for init, _ in placed)) == {"node-a", "node-b"}
