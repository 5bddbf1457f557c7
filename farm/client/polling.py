"""How often to ask the farm about unfinished jobs: short at first, backing off while nothing finishes."""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass


@dataclass(frozen=True)
class PollPolicy:
    initial_s: float = 0.02
    factor: float = 1.5
    maximum_s: float = 1.0

    def __post_init__(self) -> None:
        if self.initial_s <= 0 or self.factor < 1 or self.maximum_s < self.initial_s:
            raise ValueError("need 0 < initial_s <= maximum_s and factor >= 1")

    def delays(self) -> Iterator[float]:
        """Endless delays: initial, initial*factor, ... capped at maximum."""
        delay = self.initial_s
        while True:
            yield delay
            delay = min(delay * self.factor, self.maximum_s)


class Backoff:
    """Delays from a PollPolicy that restart from the shortest one whenever progress is reported."""

    def __init__(self, policy: PollPolicy) -> None:
        self._policy = policy
        self._delays = policy.delays()

    def progress(self) -> None:
        self._delays = self._policy.delays()

    def next_delay(self, deadline: float | None = None) -> float:
        """The next sleep, shortened so it never passes `deadline` (a time.monotonic() value)."""
        delay = next(self._delays)
        if deadline is not None:
            delay = max(0.0, min(delay, deadline - time.monotonic()))
        return delay


def deadline_after(timeout_s: float | None) -> float | None:
    return None if timeout_s is None else time.monotonic() + timeout_s


def expired(deadline: float | None) -> bool:
    return deadline is not None and time.monotonic() >= deadline
