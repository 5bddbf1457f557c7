"""The workers' Celery task events, captured while a test runs: proof that a given message was taken
and executed to its end (a check that "nothing changed" after a stray message means little unless that
message was processed)."""

from __future__ import annotations

import time
from collections.abc import Generator
from types import TracebackType
from typing import Any

from celery import Celery

from tests.waiting import wait_until

ENDS = ("task-succeeded", "task-failed")


class TaskEvents:
    """Task events on for every worker of the farm at `broker_url` while in use; `ended` waits for tasks."""

    def __init__(self, broker_url: str, workers: int) -> None:
        self.app = Celery(broker=broker_url)
        self.workers = workers
        """How many workers the farm runs: every one must answer before events count as on."""
        self.ends: dict[str, str] = {}
        """Task id -> the type of its end event."""
        self._connection: Any = None
        self._events: Generator[None, None, None] | None = None

    def __enter__(self) -> TaskEvents:
        # every worker up (one respawned a moment ago may still be starting)
        wait_until(
            lambda: self.app.control.inspect(timeout=1).ping() or {},
            30,
            accept=lambda answered: len(answered) >= self.workers,
            what=f"{self.workers} workers answering a ping",
        )
        # reply=True: returns once every worker has turned events on (the broadcast is asynchronous)
        replies = self.app.control.enable_events(reply=True, timeout=10, limit=self.workers)
        assert len(replies) == self.workers, replies
        self._connection = self.app.connection_for_read()
        handlers = {end: self._record for end in ENDS}
        receiver = self.app.events.Receiver(self._connection, handlers=handlers)
        self._events = receiver.itercapture(limit=None, timeout=20, wakeup=True)
        next(self._events)  # the first event (a heartbeat the wakeup asked for): the receiver listens
        return self

    def _record(self, event: dict[str, Any]) -> None:
        self.ends[event["uuid"]] = event["type"]

    def ended(self, task_ids: set[str], timeout_s: float) -> dict[str, str]:
        """The end event type of each of `task_ids`, once every one of them has ended."""
        assert self._events is not None
        deadline = time.monotonic() + timeout_s
        while not task_ids <= self.ends.keys():
            seen = {t: self.ends[t] for t in task_ids if t in self.ends}
            assert time.monotonic() < deadline, f"within {timeout_s}s only {seen} of {task_ids} ended"
            next(self._events)  # the next event; idle workers send a heartbeat every 2 s
        return {t: self.ends[t] for t in task_ids}

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._events is not None:
            self._events.close()
        if self._connection is not None:
            self._connection.close()
        self.app.control.disable_events()
