"""A harness job survives an API restart: the gateway is part of the API process, and while it is down
the harness's model call and the worker's session calls are retried as infrastructure, not failed."""

from __future__ import annotations

import time

import httpx
import pytest

from farm.launcher import LocalFarm, WorkerSpec
from farm.models.results import JobState
from tests.integration.test_harness_shell import AGENT, GREETING, submit_task, task_id, wait_task

pytestmark = [pytest.mark.integration, pytest.mark.slow]
# The harness calls the model while the API is down, and retries as SDKs do (on 5xx and connection errors).
SLOW_AGENT = "import time; time.sleep(1)\n" + AGENT.replace("OpenAI()", "OpenAI(max_retries=8)")


def test_a_harness_job_outlives_an_api_restart() -> None:
    farm = LocalFarm(
        workers=[WorkerSpec("init"), WorkerSpec("run", concurrency=2), WorkerSpec("eval")], supervise=True
    )
    with farm, httpx.Client(base_url=farm.api_url, timeout=30) as api:
        task = task_id("restart")
        submit_task(
            api,
            task_id=task,
            runtime={"prepare": [{"write": "agent.py", "content": SLOW_AGENT}]},
            agent={"harness": "shell", "command": "python agent.py"},
        )
        deadline = time.monotonic() + 30
        while api.get(f"/rollout/task/{task}").json()["sessions"][0]["state"] != "run":
            assert time.monotonic() < deadline
            time.sleep(0.1)
        time.sleep(0.5)  # the harness has started and holds its session
        farm.kill("api")
        result = wait_task_through_restart(api, task)
    assert result.state is JobState.done, result.error
    assert result.reward == 1.0 and GREETING in result.artifacts["output_tail"]
    assert result.artifacts["completion_count"] == 1


def wait_task_through_restart(api: httpx.Client, task: str):  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + 60
    while True:
        try:
            return wait_task(api, task, timeout_s=60)
        except httpx.HTTPError:
            assert time.monotonic() < deadline, "the API never came back"
            time.sleep(0.5)
