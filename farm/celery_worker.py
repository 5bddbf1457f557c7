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
import warnings
from typing import Any, TextIO

from celery.apps import worker as celery_worker
from celery.apps.worker import Worker

from farm.logs import stamp
from farm.memory import cap_malloc_arenas

FORCED_OPTIONS = {"without_gossip": True, "without_mingle": True}
"""Worker options the farm sets whatever the command line says (the CLI passes False by default)."""


def stamped_say(msg: str, f: TextIO = sys.__stderr__) -> None:  # type: ignore[assignment]
    """Celery's `safe_say` (its shutdown lines: `worker: Warm shutdown (MainProcess)`), stamped."""
    text = " ".join(str(msg).split())
    if text:
        celery_original_say(f"{stamp()} {text}", f)


def one_line_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    """A Python warning as one stamped line (Celery's superuser warning is seven unstamped ones; a farm
    worker runs as root by design: its sandboxes run as FARM_SANDBOX_UID)."""
    text = " ".join(str(message).split())
    print(f"{stamp()} WARNING {category.__name__}: {text}", file=file or sys.__stderr__, flush=True)


celery_original_say = celery_worker.safe_say


class FarmWorker(Worker):  # type: ignore[misc]  # Celery ships no type hints
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        cap_malloc_arenas()  # before the pool's threads exist (farm/memory.py)
        warnings.showwarning = one_line_warning
        celery_worker.safe_say = stamped_say
        super().__init__(*args, **{**kwargs, **FORCED_OPTIONS})

    def emit_banner(self) -> None:
        queues = ",".join(sorted(self.app.amqp.queues.consume_from))
        pool = getattr(self.pool_cls, "__module__", str(self.pool_cls)).rsplit(".", 1)[-1]
        broker = self.app.connection_for_read().as_uri()  # the password masked
        line = f"{stamp()} {self.hostname} starting: queues {queues}, pool {pool}"
        line += f", concurrency {self.concurrency}, broker {broker}"
        print(line, file=sys.__stdout__, flush=True)
