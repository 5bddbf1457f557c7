"""Child processes that die with the process that started them, even when it is SIGKILLed: no launcher
(`farm up`, `farm demo`, a bench, a test) leaves a Redis, an API or a worker behind.

Each child asks the kernel for SIGKILL when its parent goes (PR_SET_PDEATHSIG). The kernel ties that to
the *thread* that forked, not the process, so every child is forked from one long-lived spawner thread:
a child started from a short-lived thread (a supervisor's restart, a test's chaos thread) would
otherwise die when that thread ended.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from typing import Any

_PR_SET_PDEATHSIG = 1
_spawner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="farm-spawner")
_libc: ctypes.CDLL | None = None


def _prctl() -> Any:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)  # loaded in the parent: the child must not load it
    return _libc.prctl


def _die_with_parent(parent: int, prctl: Any) -> None:
    # In the forked child before exec: async-signal-safe calls only.
    prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:  # the parent died before the request took effect
        os.kill(os.getpid(), signal.SIGKILL)


def spawn(argv: list[str], **popen: Any) -> subprocess.Popen[bytes]:
    """`subprocess.Popen(argv, **popen)` whose process dies with this one (on Linux; elsewhere plain)."""
    if sys.platform != "linux":
        return subprocess.Popen(argv, **popen)
    prctl, parent = _prctl(), os.getpid()
    earlier = popen.pop("preexec_fn", None)

    def preexec() -> None:
        _die_with_parent(parent, prctl)
        if earlier is not None:
            earlier()

    def start() -> subprocess.Popen[bytes]:
        return subprocess.Popen(argv, preexec_fn=preexec, **popen)

    return _spawner.submit(start).result()


@contextmanager
def stopped_on_failure(stop: Callable[[], None]) -> Iterator[None]:
    """Calls `stop` when the block fails (then re-raises): a start that fails half-way leaves no child."""
    try:
        yield
    except BaseException:
        stop()
        raise
