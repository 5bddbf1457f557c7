"""Submitting jobs and waiting for their states over HTTP, shared by the integration tests."""

from __future__ import annotations

import time
import uuid

import httpx

from farm.models.results import JobResult


def submit(api: httpx.Client, instance: dict, **body: object) -> str:
    """POST /process with wait=false under a fresh job id; returns the id."""
    job_id = f"{instance['handler']}-{uuid.uuid4().hex[:10]}"
    response = api.post("/process", json={"instance": instance, "job_id": job_id, "wait": False, **body})
    assert response.status_code == 202, response.text
    return job_id


def wait_state(api: httpx.Client, job_id: str, states: set[str], timeout_s: float = 30) -> JobResult:
    """The job once it is in one of `states`, or as it is when the timeout passes."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = JobResult.model_validate(api.get(f"/jobs/{job_id}").json())
        if result.state.value in states or time.monotonic() > deadline:
            return result
        time.sleep(0.02)
