"""`farm up` supervises: a worker killed while it holds jobs is restarted, and no job is lost."""

from __future__ import annotations

import httpx
import pytest

from farm.launcher import LocalFarm, WorkerSpec
from tests.integration.jobs import submit, wait_state
from tests.waiting import wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]
TERMINAL = {"done", "failed", "cancelled", "timeout"}


def test_a_killed_worker_is_restarted_and_costs_no_job() -> None:
    farm = LocalFarm(
        workers=[WorkerSpec("init", concurrency=2), WorkerSpec("run", concurrency=4), WorkerSpec("eval")],
        llm_args=["--token-latency-ms", "20"],  # rollouts long enough to be caught mid-run
        env={"FARM_STALL_GRACE_S": "5"},
        supervise=True,
    )
    with farm, httpx.Client(base_url=farm.api_url, timeout=30) as api:
        question = {"handler": "math", "question": "What is 84 * 76 + 123?", "answer": "6507"}
        jobs = [submit(api, question, sampling_params={"seed": i}) for i in range(8)]
        run_worker = next(name for name in farm.worker_names() if "run" in name)
        old_pid = farm.child(run_worker).pid
        wait_until(  # kill it once it holds a job in its run stage
            lambda: [api.get(f"/jobs/{j}").json()["state"] for j in jobs],
            20,
            accept=lambda states: "run" in states,
            interval_s=0.05,
            what="a job in its run stage",
        )
        farm.kill(run_worker)

        wait_until(lambda: farm.child(run_worker).pid != old_pid, 30, what="the killed worker restarted")
        assert farm.restarts >= 1
        results = [wait_state(api, j, TERMINAL, timeout_s=90) for j in jobs]
        assert [r.state.value for r in results] == ["done"] * len(jobs), [r.error for r in results]
