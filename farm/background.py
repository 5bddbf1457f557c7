"""A process's background loops (the API's prober, callback sender, group settler, result waiter): how a
loop notices that it was asked to stop, and how its owner stops them all within a bound.

A loop that catches `Exception` around a Redis round can lose its cancellation: on Python 3.11 a cancel that
lands as a client's own `asyncio.timeout` expires comes out as a TimeoutError (the client's socket timeout),
which the loop reports as a failed round and sleeps on, its task still marked cancelling. CI met it as an
API that never exited after SIGTERM. So each loop asks `stop_requested()` once per round, and the owner
cancels again until the tasks end."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterable

log = logging.getLogger(__name__)

STOP_GRACE_S = 10.0
"""How long `stop_all` keeps cancelling before it leaves a loop behind, logged."""
RECANCEL_EVERY_S = 0.2


def stop_requested() -> bool:
    """The running task was cancelled, even if something below it swallowed the CancelledError."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() > 0


def raise_if_stopping() -> None:
    """For a loop's round boundary: end the loop if its task was cancelled."""
    if stop_requested():
        raise asyncio.CancelledError


async def stop_all(tasks: Iterable[asyncio.Task[object]], grace_s: float = STOP_GRACE_S) -> None:
    """Cancels the tasks and waits for them, cancelling again any that goes on (a swallowed cancel);
    a task still running after `grace_s` is logged and left to the loop's close."""
    tasks = list(tasks)
    pending = {t for t in tasks if not t.done()}
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace_s
    while pending and loop.time() < deadline:
        for task in pending:
            task.cancel()
        _, pending = await asyncio.wait(pending, timeout=min(RECANCEL_EVERY_S, deadline - loop.time()))
    for task in tasks:
        if task.done() and not task.cancelled() and task.exception() is not None:
            log.error(
                "background task %s had ended with an error", task.get_name(), exc_info=task.exception()
            )
    for task in pending:
        log.error("background task %s did not stop within %.0f s of its cancel", task.get_name(), grace_s)
