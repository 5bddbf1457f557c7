"""Flower as the README says: `celery -A farm flower` with `--basic-auth` gives a UI and an API that
answer with the credentials and 401 without, and the API lists each stage task of a job with its name,
arguments and times (Flower turns task events on itself)."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from farm.launcher import LocalFarm, WorkerSpec
from tests.operator.flower import running_flower
from tests.waiting import WaitTimeout, wait_until

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def test_flower_with_basic_auth_shows_stage_tasks_with_name_args_and_times(tmp_path: Path) -> None:
    workers = [WorkerSpec(q, concurrency=2) for q in ("init", "run", "eval")]
    auth = ("op", "s3cret")
    with (
        LocalFarm(workers=workers, llm_policy=None, env={"FARM_WORKDIR": str(tmp_path / "w")}) as farm,
        running_flower(
            farm.redis_url or "", "--basic-auth=op:s3cret", ready="/api/workers", auth=auth
        ) as flower,
    ):
        base = flower.url
        assert httpx.get(f"{base}/api/workers", timeout=5).status_code == 401
        assert httpx.get(f"{base}/", auth=auth, timeout=5).status_code == 200

        # Flower asks the workers for task events every 5 s from its start (its periodic
        # enable_events), so a job run before the first ask is not seen: jobs until one is.
        def a_job_seen() -> list[dict[str, object]]:
            job_id = httpx.post(
                f"{farm.api_url}/process",
                json={"instance": {"handler": "noop"}, "wait": True},
                timeout=60,
            ).json()["job_id"]
            try:
                return wait_until(
                    lambda: stage_tasks(job_id), 3, accept=lambda t: len(t) >= 3, what="the job's tasks"
                )
            except WaitTimeout:
                return []

        def stage_tasks(job_id: str) -> list[dict[str, object]]:
            tasks = httpx.get(f"{base}/api/tasks", auth=auth, timeout=5).json()
            return [t for t in tasks.values() if job_id in str(t.get("args"))]

        seen = wait_until(
            a_job_seen, 60, accept=lambda t: len(t) >= 3, what="a job's three stage tasks in Flower"
        )
        for task in seen:
            assert task["name"] in ("farm.init", "farm.run", "farm.eval"), task
            assert task["received"] and task["started"], task
