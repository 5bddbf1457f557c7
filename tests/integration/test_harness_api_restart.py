"""A harness job survives an API restart: the gateway is part of the API process, and while it is down
the harness's model call and the worker's session calls are retried as infrastructure, not failed."""

from __future__ import annotations

import contextlib

import httpx
import psutil
import pytest

from farm.launcher import LocalFarm, WorkerSpec
from farm.models.results import JobResult, JobState
from tests.integration.jobs import wait_task_completed
from tests.integration.test_harness_shell import AGENT, GREETING, submit_task, task_id
from tests.waiting import wait_until

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
        wait_until(
            lambda: api.get(f"/rollout/task/{task}").json()["sessions"][0]["state"] == "run",
            30,
            interval_s=0.05,
            what="the session in its run stage",
        )
        wait_until(lambda: harness_started(farm), 30, interval_s=0.05, what="the harness (agent.py) running")
        farm.kill("api")
        # the API comes back (supervised); meanwhile every call fails at the transport
        status = wait_task_completed(api, task, 120, ignore=(httpx.HTTPError,))
    [session] = status["sessions"]
    result = JobResult.model_validate(session["result"])
    assert result.state is JobState.done, result.error
    assert result.reward == 1.0 and GREETING in result.artifacts["output_tail"]
    assert result.artifacts["completion_count"] == 1


def harness_started(farm: LocalFarm) -> bool:
    """Whether `python agent.py` runs in a sandbox of one of the farm's workers."""
    for name in farm.worker_names():
        with contextlib.suppress(psutil.Error):
            for process in psutil.Process(farm.child(name).pid).children(recursive=True):
                with contextlib.suppress(psutil.Error):
                    if "agent.py" in process.cmdline():
                        return True
    return False
