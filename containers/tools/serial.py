"""One call at a time on a stateful tool (a shell, a kernel), with a flag saying whether one is running."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager


class OneAtATime:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.busy = False
        """A call is running: what `interrupt` checks before it signals (read without the lock)."""

    @contextmanager
    def call(self) -> Iterator[None]:
        with self._lock:
            self.busy = True
            try:
                yield
            finally:
                self.busy = False
