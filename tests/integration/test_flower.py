"""Flower's view of a launched farm: it lists workers from their heartbeat events, and sees task events
once it has asked the workers for them (Flower broadcasts `enable_events` while it runs)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from celery import Celery

from farm.jobs.dispatch import stage_task_ids
from farm.launcher import LocalFarm
from tests.integration.jobs import submit, wait_state
from tests.integration.task_events import TaskEvents

pytestmark = pytest.mark.slow


def capture(
    app: Celery, event: str, enough: Callable[[list[dict[str, Any]]], bool], timeout_s: float
) -> list[dict[str, Any]]:
    """Events of one type, captured from the broker until `enough` says so or time runs out."""
    seen: list[dict[str, Any]] = []
    deadline = time.monotonic() + timeout_s
    with app.connection_for_read() as connection:
        receiver = app.events.Receiver(connection, handlers={event: seen.append})
        wakeup = True  # asks every worker for a heartbeat at once
        while not enough(seen) and time.monotonic() < deadline:
            try:
                for _ in receiver.itercapture(limit=None, timeout=1.0, wakeup=wakeup):
                    if enough(seen) or time.monotonic() > deadline:
                        break
            except TimeoutError:  # a second without any event
                pass
            wakeup = False
    return seen


def test_flower_sees_every_worker_and_task_events(farm: LocalFarm, api: httpx.Client) -> None:
    app = Celery(broker=farm.redis_url)
    replies = app.control.inspect(timeout=2).ping() or {}
    workers = set(replies)
    assert len(workers) >= 3

    # heartbeats come every 10 s, and sooner when asked (wakeup); a loaded host delays both: a margin
    heartbeats = capture(app, "worker-heartbeat", lambda s: workers <= {e["hostname"] for e in s}, 60)
    assert workers <= {e["hostname"] for e in heartbeats}

    # What Flower does while it runs: ask the workers for task events (tests/integration/task_events.py)
    with TaskEvents(farm.redis_url, workers=len(farm.worker_names())) as events:
        job_id = submit(api, {"handler": "noop"})
        stages = set(stage_task_ids(job_id).values())
        assert events.ended(stages, 20) == dict.fromkeys(stages, "task-succeeded")
    assert wait_state(api, job_id, {"done"}).state.value == "done"
