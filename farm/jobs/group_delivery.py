"""When a task's group is delivered, and which of its sessions are re-run: pure rules, no I/O.

A task that sets `min_usable`, `deadline_s` or `infra_reruns` (farm/models/tasks.py) is a group: it is
delivered once `min_usable` sessions ended usable, or every session ended, or its deadline passed,
whichever comes first. A session that ended with an infrastructure failure (farm.models.failures) is
re-run as a new session of the same sample index, at most `infra_reruns` times, while the group is not
delivered: one sample re-run, never the whole group. The API's group settler (farm/api/groups.py)
carries out what `decide` says.
"""

from __future__ import annotations

from dataclasses import dataclass

from farm.models.failures import infrastructure_failure
from farm.models.results import JobResult, JobState
from farm.models.tasks import DeliveryReason


def rerun_id(first_session: str, attempt: int) -> str:
    """The id of a sample's `attempt`-th re-run (`~` never appears in caller-chosen ids)."""
    return f"{first_session}~r{attempt}"


@dataclass(frozen=True)
class Slot:
    """One sample of the group, as its current session (the latest re-run) stands."""

    index: int
    session_id: str
    state: JobState | None
    """None: the session does not exist (yet)."""
    result: JobResult | None
    reruns: int
    """Re-runs of this sample so far."""

    @property
    def terminal(self) -> bool:
        return self.state is not None and self.state.terminal

    @property
    def usable(self) -> bool:
        return self.state is JobState.done and self.result is not None and self.result.reward is not None

    @property
    def infra_failure(self) -> str | None:
        if not self.terminal or self.result is None:
            return None
        return infrastructure_failure(self.result)


@dataclass(frozen=True)
class Decision:
    reruns: list[tuple[int, str]]
    """(sample index, failure class) of the samples to re-run now."""
    deliver: DeliveryReason | None
    """Set: deliver the group now, for this reason."""


def decide(
    slots: list[Slot], *, min_usable: int, max_reruns: int, deadline_at: float | None, now: float
) -> Decision:
    """What to do with an undelivered group now."""
    reruns = [
        (slot.index, failure)
        for slot in slots
        if (failure := slot.infra_failure) is not None and slot.reruns < max_reruns
    ]
    rerunning = {index for index, _ in reruns}
    usable = sum(slot.usable for slot in slots)
    if usable >= min_usable:
        return Decision([], "min_usable" if usable < len(slots) else "complete")
    if all(slot.terminal for slot in slots) and not rerunning:
        return Decision([], "complete")
    if deadline_at is not None and now >= deadline_at:
        return Decision([], "deadline")
    return Decision(reruns, None)


def stragglers(slots: list[Slot]) -> list[str]:
    """Sessions of the group not terminal (still queued or running) at delivery."""
    return [slot.session_id for slot in slots if not slot.terminal]
