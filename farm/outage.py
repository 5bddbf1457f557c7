"""A Redis outage, told once: each process logs one line when it loses the farm's Redis and one when it
is back, whichever of its loops (heartbeat, reaper, job monitor, the API's waiter...) notices first.
An expected outage (a refused or timed-out connection) carries no traceback; anything else still does.
"""

from __future__ import annotations

import logging
import threading
import time

import redis
from kombu.exceptions import OperationalError

log = logging.getLogger("farm.redis")

OUTAGE_ERRORS: tuple[type[BaseException], ...] = (
    redis.ConnectionError,
    redis.TimeoutError,
    OperationalError,
    ConnectionError,
    TimeoutError,
)
"""What an unreachable Redis raises: redis-py's connection errors, kombu's, the OS's."""


def is_outage(exc: BaseException) -> bool:
    return isinstance(exc, OUTAGE_ERRORS)


def one_line(exc: BaseException) -> str:
    return " ".join(f"{type(exc).__name__}: {exc}".split())


class RedisOutage:
    """This process's view of its Redis: up, or lost since a moment. Thread-safe; the transitions log."""

    def __init__(self) -> None:
        self._since: float | None = None
        self._lock = threading.Lock()

    @property
    def down(self) -> bool:
        return self._since is not None

    def lost(self, where: str, exc: BaseException | str) -> None:
        """Record a failed Redis call by `where`; logs only the first of an outage."""
        if self._since is not None:
            return
        with self._lock:
            if self._since is not None:
                return
            self._since = time.monotonic()
        what = exc if isinstance(exc, str) else one_line(exc)
        log.warning("lost the farm's Redis (%s: %s); retrying until it is back", where, what)

    def back(self) -> None:
        """Record a Redis call that succeeded; logs once when it ends an outage."""
        if self._since is None:
            return
        with self._lock:
            if self._since is None:
                return
            down_s, self._since = time.monotonic() - self._since, None
        log.warning("the farm's Redis is back (unreachable for %.1f s)", down_s)


redis_outage = RedisOutage()
"""The process's one instance."""


def report(where: str, exc: BaseException, logger: logging.Logger, what: str) -> None:
    """For a loop's failed round: an outage is told once (redis_outage), anything else with its
    traceback under `what`."""
    if is_outage(exc):
        redis_outage.lost(where, exc)
    else:
        logger.warning(what, exc_info=exc)
