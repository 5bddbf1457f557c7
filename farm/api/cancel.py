"""Cancellation: mark jobs revoked in Redis; end queued ones at once, running ones at their next check."""

from __future__ import annotations

import asyncio

from farm.api.state import FarmState
from farm.jobs.spec import JobSpec
from farm.jobs.store import terminal_result
from farm.models.requests import CancelRequest
from farm.models.results import JobState, StageError


async def resolve_targets(farm: FarmState, body: CancelRequest) -> list[str]:
    targets: list[str] = []
    if body.job_id is not None and await farm.store.exists(body.job_id):
        targets.append(body.job_id)
    if body.task_id is not None:
        found = await farm.tasks.sessions(body.task_id)
        targets.extend(found[0] if found else [])
        if found:  # and the sessions its group re-ran (farm/api/groups.py)
            reruns = (await farm.tasks.group_record(body.task_id)).reruns
            targets.extend(entry["session_id"] for entries in reruns.values() for entry in entries)
    if body.group_id is not None or body.older_than_policy_version is not None:
        active = await farm.store.active_ids()
        for job_id, spec in zip(active, await farm.store.specs(active), strict=True):
            if spec and _matches(spec, body):
                targets.append(job_id)
    return list(dict.fromkeys(targets))


def _matches(spec: JobSpec, body: CancelRequest) -> bool:
    meta = spec.metadata
    if body.group_id is not None and meta.get("group_id", spec.task_id) != body.group_id:
        return False
    if body.older_than_policy_version is not None:
        version = meta.get("policy_version")
        if not isinstance(version, int | float) or version >= body.older_than_policy_version:
            return False
    return True


async def cancel_jobs(farm: FarmState, job_ids: list[str]) -> dict[str, str]:
    """Returns each job's state after the call (terminal jobs keep theirs)."""
    return dict(zip(job_ids, await asyncio.gather(*(_cancel_one(farm, j) for j in job_ids)), strict=True))


async def _cancel_one(farm: FarmState, job_id: str) -> str:
    record = await farm.store.get(job_id)
    if record is None:
        return "unknown"
    if record.state.terminal:
        return record.state.value
    await farm.store.revoke(job_id)
    if record.state is JobState.queued:
        result = terminal_result(
            record,
            JobState.cancelled,
            StageError(stage="queue", type="cancelled", message="cancelled while queued"),
        )
        if await farm.store.finalize(result, only_from="queued"):
            await farm.pool.release(job_id)
            return JobState.cancelled.value
    # A stage is running: it sees the revocation at its next check and ends the job itself.
    record = await farm.store.get(job_id)
    return record.state.value if record else "unknown"
