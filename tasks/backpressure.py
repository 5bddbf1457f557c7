"""The READY buffer: init on a node waits for one of the node's slots before preparing a sandbox.

A slot is held from the start of init until the job's run stage starts (or the job ends), so the
buffer bounds the sandboxes a node has prepared or is preparing but not yet running. While run is the
bottleneck, init stops taking work instead of piling up sandboxes that wait for minutes.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from farm.settings import get_settings

if TYPE_CHECKING:
    from farm.handler.context import JobContext
    from tasks.holder import StageHolder

POLL_FIRST_S = 0.02
POLL_MAX_S = 0.25


def wait_for_ready_slot(attempt: StageHolder, ctx: JobContext) -> float:
    """Blocks until the job holds a READY slot on this node; returns the seconds waited.

    The wait is queueing, not work: the job's budget and stage timer are moved past it and the time
    is booked as queued. Cancellation, a lost lease and draining interrupt the wait (ctx.check raises).
    """
    limit = get_settings().ready_buffer
    if limit <= 0:
        return 0.0
    started = time.monotonic()
    pause = POLL_FIRST_S
    while not attempt.store.take_ready_slot(attempt.job_id, ctx.node, limit):
        if ctx.interruption() is not None:
            ctx.check()
        time.sleep(pause)
        pause = min(pause * 1.5, POLL_MAX_S)
    waited = time.monotonic() - started
    if waited > 0.001:
        ctx.started += waited
        ctx.deadline += waited
        ctx.timings_before = ctx.timings_before.model_copy(
            update={"queued": ctx.timings_before.queued + waited}
        )
        attempt.store.add_queued_time(attempt.job_id, waited)
    return waited
