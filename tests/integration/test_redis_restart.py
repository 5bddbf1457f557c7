"""Redis restarted under a running farm (AOF on): no submitted job is lost."""

from __future__ import annotations

import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from farm.embedded_redis import EmbeddedRedis
from farm.launcher import LocalFarm, WorkerSpec
from farm.models.results import JobResult, JobState
from tests.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def aof_farm() -> Iterator[tuple[LocalFarm, EmbeddedRedis]]:
    logs = Path(tempfile.mkdtemp(prefix="farm-restart-"))
    server = EmbeddedRedis(appendonly=True).start()
    workers = [WorkerSpec(q, concurrency=4) for q in ("init", "run", "eval")]
    farm = LocalFarm(
        redis_url=server.url,
        workers=workers,
        llm_policy=None,
        log_dir=logs,
        supervise=True,  # a worker may die on the lost connection (kombu); its supervisor restarts it
        # A message popped off its queue in the instant Redis went down is found by the sweeps:
        # short graces keep the test short (the defaults are 30 s and 60 s).
        env={"FARM_WORKDIR": str(logs / "work"), "FARM_STALL_GRACE_S": "5"},
    )
    farm.start(timeout_s=90)
    yield farm, server
    farm.stop()
    server.stop()


def test_redis_restarted_with_aof_loses_no_submitted_job(aof_farm: tuple[LocalFarm, EmbeddedRedis]) -> None:
    farm, server = aof_farm
    with httpx.Client(base_url=farm.api_url, timeout=60) as api:
        jobs = []
        for _ in range(20):
            job_id = f"r-{uuid.uuid4().hex[:10]}"
            body = {"instance": {"handler": "noop", "run_s": 0.2}, "job_id": job_id, "wait": False}
            assert api.post("/process", json=body).status_code == 202
            jobs.append(job_id)
        server.stop()  # SIGTERM: Redis writes its AOF out before exiting
        time.sleep(0.5)  # the scenario, not a wait: the farm meets a Redis that is down for a while
        server.start()
        pending = set(jobs)
        states: dict[str, JobState] = {}

        def unfinished() -> set[str]:
            for job_id in list(pending):
                result = JobResult.model_validate(api.get(f"/jobs/{job_id}").json())
                if result.state.terminal:
                    states[job_id] = result.state
                    pending.discard(job_id)
            return pending

        wait_until(unfinished, 90, accept=lambda left: not left, interval_s=0.1, what="every job finished")
    assert set(states.values()) == {JobState.done}
