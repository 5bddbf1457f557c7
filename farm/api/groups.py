"""Groups with a deadline: the API settles each task that asked for group delivery (the rules are in
farm/jobs/group_delivery.py) on every read of the task and, in the background, every GROUP_TICK_S
until delivered.

Settling is idempotent and safe from several API replicas at once: a re-run's id is fixed by its sample and
attempt (creating it twice is a no-op), it is recorded with HSETNX, and the delivery is recorded once
(HSETNX) by the replica that then cancels the stragglers.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass

from farm.api.cancel import cancel_jobs
from farm.api.state import FarmState
from farm.api.task_sessions import checked, session_spec
from farm.background import raise_if_stopping
from farm.jobs.group_delivery import Slot, decide, rerun_id, stragglers
from farm.jobs.spec import session_id
from farm.jobs.task_records import GroupRecord
from farm.models.tasks import GroupStatus, Rerun, SessionStatus, TaskRequest
from farm.outage import report

log = logging.getLogger(__name__)

GROUP_TICK_S = 0.25
"""How often the background settler looks at undelivered groups (a deadline is kept to about this)."""
GROUPS_PER_TICK = 500


@dataclass(frozen=True)
class Settled:
    sessions: list[SessionStatus]
    """The current session of each sample (a re-run replaces the session it re-runs), in sample order."""
    group: GroupStatus
    size: int

    @property
    def terminal(self) -> bool:
        """Every sample's current session ended."""
        return len(self.sessions) == self.size and all(s.state.terminal for s in self.sessions)


async def settle(farm: FarmState, body: TaskRequest, now: float | None = None) -> Settled:
    """Re-runs what must be re-run and delivers the group when its time has come; returns its state."""
    now = time.time() if now is None else now
    ids = [session_id(body.task_id, i) for i in range(body.num_samples)]
    record = await farm.tasks.group_record(body.task_id)
    if record.created_at is None:  # the task's record expired (result TTL): nothing left to settle
        await farm.tasks.close_group(body.task_id)
    slots = await _slots(farm, ids, record)
    deadline_at = None if body.deadline_s is None else _created_at(record) + body.deadline_s
    delivery = record.delivered
    if delivery is None and record.created_at is not None:
        await _heal(farm, body, slots, record)
        decision = decide(
            slots,
            min_usable=body.usable_target,
            max_reruns=body.infra_reruns,
            deadline_at=deadline_at,
            now=now,
        )
        for index, reason in decision.reruns:
            await _rerun(farm, body, slots[index], ids[index], reason)
        if decision.deliver is not None:
            delivery = {
                "reason": decision.deliver,
                "at": now,
                "usable": [s.session_id for s in slots if s.usable],
                "stragglers": stragglers(slots),
                "policy": body.stragglers,
            }
            if await farm.tasks.deliver(body.task_id, delivery):
                if body.stragglers == "cancel" and delivery["stragglers"]:
                    await cancel_jobs(farm, list(delivery["stragglers"]))
                await farm.tasks.close_group(body.task_id)
            else:  # another replica delivered first: its record is the one
                delivery = (await farm.tasks.group_record(body.task_id)).delivered
        if decision.reruns or decision.deliver is not None:
            record = await farm.tasks.group_record(body.task_id)
            slots = await _slots(farm, ids, record)
    group = GroupStatus(
        min_usable=body.usable_target,
        deadline_at=deadline_at,
        usable=sum(s.usable for s in slots),
        delivered=delivery is not None,
        delivered_reason=None if delivery is None else delivery["reason"],
        delivered_at=None if delivery is None else delivery["at"],
        usable_session_ids=[] if delivery is None else list(delivery["usable"]),
        stragglers=[] if delivery is None else list(delivery["stragglers"]),
        straggler_policy=body.stragglers,
        reruns=[
            Rerun(sample_index=index, **entry)
            for index, entries in sorted(record.reruns.items())
            for entry in entries
        ],
    )
    sessions = [
        SessionStatus(session_id=s.session_id, state=s.state, result=s.result, sample_index=s.index)
        for s in slots
        if s.state is not None
    ]
    return Settled(sessions, group, len(slots))


def _created_at(record: GroupRecord) -> float:
    return record.created_at if record.created_at is not None else time.time()


async def _slots(farm: FarmState, ids: list[str], record: GroupRecord) -> list[Slot]:
    current = [
        record.reruns[i][-1]["session_id"] if record.reruns.get(i) else first for i, first in enumerate(ids)
    ]
    records = await farm.store.get_many(current)
    return [
        Slot(
            index=i,
            session_id=job_id,
            state=None if found is None else found.state,
            result=found.result if found is not None and found.state.terminal else None,
            reruns=len(record.reruns.get(i, [])),
        )
        for i, (job_id, found) in enumerate(zip(current, records, strict=True))
    ]


async def _rerun(farm: FarmState, body: TaskRequest, slot: Slot, first: str, reason: str) -> None:
    attempt = slot.reruns + 1
    new_id = rerun_id(first, attempt)
    entry = {"session_id": new_id, "replaced": slot.session_id, "reason": reason}
    await farm.tasks.add_rerun(body.task_id, slot.index, attempt, entry)
    await _submit(farm, body, slot.index, new_id, attempt, slot.session_id)
    log.info("task %s: sample %d re-run as %s after %s", body.task_id, slot.index, new_id, reason)


async def _heal(farm: FarmState, body: TaskRequest, slots: list[Slot], record: GroupRecord) -> None:
    """A re-run recorded by a replica that died before creating it is created now."""
    for slot in slots:
        entries = record.reruns.get(slot.index)
        if slot.state is None and entries:
            await _submit(farm, body, slot.index, slot.session_id, len(entries), entries[-1]["replaced"])


async def _submit(
    farm: FarmState, body: TaskRequest, index: int, job_id: str, attempt: int, replaced: str
) -> None:
    instance, handler = checked(body)
    extra = {"attempt": attempt, "rerun_of": replaced}
    await farm.submitter.submit(session_spec(body, instance, handler, index, job_id, extra))


async def settle_forever(farm: FarmState) -> None:
    """The background settler: delivers groups at their deadline and re-runs their infrastructure failures
    even when nobody reads the task."""
    requests: dict[str, TaskRequest] = {}
    """Open groups' requests, read and parsed once (a stored request never changes)."""
    while True:
        raise_if_stopping()
        try:
            open_now = await farm.tasks.open_groups(GROUPS_PER_TICK)
            for task_id in set(requests) - set(open_now):
                del requests[task_id]
            for task_id in open_now:
                if task_id not in requests:
                    stored = await farm.tasks.stored(task_id)
                    if stored.request is None:  # expired
                        await farm.tasks.close_group(task_id)
                        continue
                    if not stored.submitted:
                        continue
                    requests[task_id] = TaskRequest.model_validate_json(stored.request)
                await settle(farm, requests[task_id])
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            report("group settler", exc, log, "settling groups failed; retrying")
        await asyncio.sleep(GROUP_TICK_S)
