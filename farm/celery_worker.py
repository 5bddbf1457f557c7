"""What the farm needs of a Celery worker, whatever command line started it.

`celery -A farm worker -Q run` (the documented command) and the farm's own launcher must give the same
worker: the launcher's flags are not something an operator has to remember. So the app's `Worker` is
this subclass, which
- turns gossip and mingle off: the farm uses neither (its registry of live workers is its own heartbeat,
  farm/workers.py), and through a Redis outage Celery's gossip restart fails with a traceback per
  reconnect (`Error on restarting Gossip: AttributeError(...)`), mingle waits on replies at every start;
- prints its start banner as one timestamped line instead of Celery's unstamped ASCII art, so every
  line a worker writes carries its time.
"""

from __future__ import annotations

import sys
import time
from typing import Any

from celery.apps.worker import Worker

FORCED_OPTIONS = {"without_gossip": True, "without_mingle": True}
"""Worker options the farm sets whatever the command line says (the CLI passes False by default)."""


def stamp(now: float | None = None) -> str:
    """The time prefix of Celery's own log lines (`[2026-01-01 12:00:00,123: ...]`), without the brackets."""
    now = time.time() if now is None else now
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now)) + f",{int(now % 1 * 1000):03d}"


class FarmWorker(Worker):  # type: ignore[misc]  # Celery ships no type hints
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **{**kwargs, **FORCED_OPTIONS})

    def emit_banner(self) -> None:
        queues = ",".join(sorted(self.app.amqp.queues.consume_from))
        pool = getattr(self.pool_cls, "__module__", str(self.pool_cls)).rsplit(".", 1)[-1]
        broker = self.app.connection_for_read().as_uri()  # the password masked
        line = f"{stamp()} {self.hostname} starting: queues {queues}, pool {pool}"
        line += f", concurrency {self.concurrency}, broker {broker}"
        print(line, file=sys.__stdout__, flush=True)
