"""A job can require a minimum policy version: a backend serving older weights (or none registered) is not
used for it (session farm: real API, workers and reference LLM servers)."""

from __future__ import annotations

import httpx

from farm.launcher import LocalFarm
from farm.models.results import JobState
from tests.integration.jobs import submit, wait_state

PROBE = {"handler": "noop", "generate_tokens": 4}


def test_a_job_requiring_a_min_version_skips_older_backends(api: httpx.Client, farm: LocalFarm) -> None:
    new, *old = farm.llm_urls
    try:
        api.post("/add_llm_server", json={"address": new, "policy_version": 7}).raise_for_status()
        jobs = [submit(api, PROBE, metadata={"min_policy_version": 7}) for _ in range(4)]
        results = [wait_state(api, job, {"done", "failed", "timeout", "cancelled"}) for job in jobs]
        assert [r.state for r in results] == [JobState.done] * 4, [r.error for r in results]
        assert {r.artifacts["backend"] for r in results} == {new.rstrip("/")}
        unpinned = [submit(api, PROBE) for _ in range(6)]
        used = {wait_state(api, job, {"done"}).artifacts["backend"] for job in unpinned}
        assert used & {url.rstrip("/") for url in old}  # the older backends still serve other jobs
        # nothing serves 8 yet: the job waits for a publish, then ends as no backend, never on an old one
        waiting = submit(api, PROBE, metadata={"min_policy_version": 8}, timeout_s=2)
        failed = wait_state(api, waiting, {"done", "failed", "timeout", "cancelled"}, timeout_s=30)
        assert failed.state is not JobState.done and failed.error is not None
        assert failed.error.type == "NoBackendAvailable", failed
        assert "min_policy_version" in failed.error.message
    finally:  # back to an unversioned backend for the other tests (a remove and add is a swap)
        api.post("/remove_llm_server", json={"address": new})
        api.post("/add_llm_server", json={"address": new}).raise_for_status()


def test_a_bad_min_policy_version_is_a_422_naming_it(api: httpx.Client) -> None:
    response = api.post("/process", json={"instance": PROBE, "metadata": {"min_policy_version": "new"}})
    assert response.status_code == 422 and "min_policy_version" in response.text
