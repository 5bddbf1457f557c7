"""Waiting for jobs to end without polling every job: one Redis pub/sub subscription per API
process wakes the waiters of each job id published on `farm:done`. A slow re-check of the record
covers a missed message (pub/sub is fire-and-forget)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass

import redis.asyncio as aioredis

from farm import keys
from farm.background import raise_if_stopping, stop_all
from farm.jobs.store import AsyncJobStore, JobPeek
from farm.outage import redis_outage, report
from farm.text import as_text

log = logging.getLogger(__name__)
RECHECK_S = 1.0


class JobWaiter:
    def __init__(self, client: aioredis.Redis, store: AsyncJobStore) -> None:
        self.r = client
        self.store = store
        self._events: dict[str, list[asyncio.Event]] = defaultdict(list)
        self._task: asyncio.Task[None] | None = None
        self.any_done = asyncio.Event()
        """Set whenever a job with a callback_url ends (the callback sender waits on it instead of
        polling; jobs without one do not wake it)."""
        self.callbacks_due: set[str] = set()
        """The ids of those jobs, until the callback sender takes them."""

    async def start(self) -> None:
        self._task = asyncio.create_task(self._listen(), name="result waiter")

    async def stop(self) -> None:
        if self._task:
            await stop_all([self._task])

    async def _listen(self) -> None:
        while True:
            raise_if_stopping()
            pubsub = self.r.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.subscribe(keys.DONE_CHANNEL, keys.CALLBACKS_DUE_CHANNEL)
                redis_outage.back()
                async for message in pubsub.listen():
                    if as_text(message.get("channel")) == keys.CALLBACKS_DUE_CHANNEL:
                        self.callbacks_due.add(as_text(message.get("data")))
                        self.any_done.set()
                        continue
                    job_id = as_text(message.get("data"))
                    for event in self._events.get(job_id, []):
                        event.set()
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                report("result subscription", exc, log, "result subscription lost; resubscribing")
                await asyncio.sleep(0.5)
            finally:
                with contextlib.suppress(Exception):
                    await pubsub.aclose()  # type: ignore[no-untyped-call]

    @contextlib.contextmanager
    def watch(self, job_id: str) -> Iterator[JobWatch]:
        """Listens for the end of `job_id` from now on. Enter it before creating the job: a no-op job
        can end before the coroutine that created it runs again (its end is then not missed)."""
        event = asyncio.Event()
        self._events[job_id].append(event)
        try:
            yield JobWatch(self.store, job_id, event)
        finally:
            self._events[job_id].remove(event)
            if not self._events[job_id]:
                del self._events[job_id]


@dataclass
class JobWatch:
    """One caller's open watch on one job (JobWaiter.watch); its event is set by the job's end."""

    store: AsyncJobStore
    job_id: str
    event: asyncio.Event

    async def result(self, timeout_s: float, just_created: bool = False) -> JobPeek | None:
        """The job's state and stored result once terminal, or its state when the timeout passes
        (None if unknown). Reads two fields per wake-up, never the whole record; a job `just_created`
        while this watch was open is not read before its first wake-up (nothing ran yet when the watch
        opened, so its end wakes it)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout_s
        unread = just_created
        while True:
            if unread:
                unread = False
            else:
                peek = await self.store.peek(self.job_id)
                if peek is None or peek.terminal or loop.time() >= deadline:
                    return peek
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(min(RECHECK_S, deadline - loop.time())):
                    await self.event.wait()
            self.event.clear()
