"""Task submission is all or completable: an API killed in the middle of `num_samples: 1024` leaves
nothing, or a task that reads `submitting` (never `completed` with sessions missing) and whose
re-submission creates exactly the missing sessions."""

from __future__ import annotations

import contextlib
import signal
import threading
from collections.abc import Callable

import httpx
import pytest
import redis

from farm import keys
from farm.launcher import LocalFarm
from tests.waiting import wait_answering, wait_until


def _wait_up(farm: LocalFarm) -> None:
    wait_answering(f"{farm.api_url}/healthz", 20, what="the API to come back", interval_s=0.05, request_s=1)


def _sessions_of(r: redis.Redis, task_id: str) -> int:
    return sum(1 for _ in r.scan_iter(match=f"{keys.job(task_id)}*", count=1000))


@pytest.mark.slow  # kills an API process mid-request: the CI slow step
def test_an_api_killed_mid_submission_leaves_a_completable_task(start_api: Callable[..., LocalFarm]) -> None:
    farm = start_api()
    r = redis.Redis.from_url(farm.redis_url)
    task = {"task_id": "t-crash-1024", "instruction": "x", "num_samples": 1024, "agent": {"handler": "noop"}}
    before = r.scard(keys.active(keys.layout().tag("")))

    def submit() -> None:
        with contextlib.suppress(httpx.TransportError):  # the API dies under us, which is the point
            httpx.post(f"{farm.api_url}/rollout/task/submit", json=task, timeout=30)

    sender = threading.Thread(target=submit)
    sender.start()
    # polled tightly: the kill must land while the 1024 sessions are still being created
    active = keys.active(keys.layout().tag(""))
    wait_until(lambda: r.scard(active) - before >= 40, 20, interval_s=0.002, what="the submission")
    farm.kill("api", signal.SIGKILL)
    sender.join(30)
    created = _sessions_of(r, "t-crash-1024")
    assert 40 <= created < 1024, f"the kill did not land mid-submission ({created} sessions)"

    farm.respawn("api")
    _wait_up(farm)
    with httpx.Client(base_url=farm.api_url, timeout=30) as http:
        status = http.get("/rollout/task/t-crash-1024").json()
        assert status["state"] == "submitting" and len(status["sessions"]) == created

        again = http.post("/rollout/task/submit", json={**task, "num_samples": 2})  # the first request wins
        assert again.status_code == 200 and len(again.json()["session_ids"]) == 1024
        assert _sessions_of(r, "t-crash-1024") == 1024
        status = http.get("/rollout/task/t-crash-1024").json()
        assert status["state"] == "running" and len(status["sessions"]) == 1024
        assert len({s["session_id"] for s in status["sessions"]}) == 1024
        # and once complete, re-submitting creates nothing more
        assert http.post("/rollout/task/submit", json=task).json() == again.json()
    assert r.scard(keys.active(keys.layout().tag(""))) - before == 1024
    r.close()


def test_submission_is_idempotent_and_every_session_exists(api: httpx.Client) -> None:
    task = {"task_id": "t-idem-16", "instruction": "x", "num_samples": 16, "agent": {"handler": "noop"}}
    first = api.post("/rollout/task/submit", json=task).json()
    assert api.post("/rollout/task/submit", json=task).json() == first
    status = api.get("/rollout/task/t-idem-16").json()
    assert status["state"] == "running" and len(status["sessions"]) == 16


def test_bad_sampling_params_are_a_422_before_the_task_is_claimed(api: httpx.Client) -> None:
    """Found by the schema fuzzer: an unknown sampling key answered 500 after the task id was claimed."""
    task = {"task_id": "t-bad-sampling", "instruction": "x", "agent": {"handler": "noop"}}
    refused = api.post("/rollout/task/submit", json={**task, "sampling_params": {"x": {}, "temperature": 1}})
    assert refused.status_code == 422, refused.text
    assert refused.json()["detail"][0]["loc"] == ["body", "sampling_params"]
    assert "sampling_params.x: not a sampling parameter" in refused.json()["detail"][0]["msg"]
    # nothing was claimed: the same task id, corrected, runs
    accepted = api.post("/rollout/task/submit", json={**task, "sampling_params": {"top_k": 5}})
    assert accepted.status_code == 200 and accepted.json()["session_ids"] == ["t-bad-sampling~0"]
