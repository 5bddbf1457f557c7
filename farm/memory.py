"""The farm's own processes hold memory by their work, not by the machine's core count.

glibc's malloc gives each thread that contends for an allocation an arena of its own, up to 8 per core
(128 on a 16-core node): a threads-pool worker or the API's thread pool then keeps tens of mostly empty
arenas, and resident memory grows with the cores, not the rollouts (issue 37: the same run held 518 MB
of workers on 2 cores and 1,878 MB on 16). The farm caps the arenas of its own processes at
FARM_MALLOC_ARENA_MAX (default 2, as it already does inside sandboxes); 0 leaves glibc's default. It is
set at process start through `mallopt` (whatever started the process: `celery -A farm worker`, `farm
api`, uvicorn), and exported as MALLOC_ARENA_MAX to the children the launcher starts.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import os

log = logging.getLogger(__name__)
M_ARENA_MAX = -8
"""glibc's mallopt parameter number (malloc.h)."""
DEFAULT_ARENA_MAX = 2


def arena_max() -> int:
    raw = os.environ.get("FARM_MALLOC_ARENA_MAX", "")
    try:
        return max(0, int(raw)) if raw.strip() else DEFAULT_ARENA_MAX
    except ValueError:
        return DEFAULT_ARENA_MAX


def cap_malloc_arenas() -> bool:
    """Caps this process's malloc arenas; False where there is nothing to cap (not glibc, or 0)."""
    wanted = arena_max()
    if wanted == 0:
        return False
    name = ctypes.util.find_library("c")
    try:
        libc = ctypes.CDLL(name or "libc.so.6")
        mallopt = libc.mallopt
    except (OSError, AttributeError):
        return False  # musl, macOS: their allocators do not keep per-thread arenas this way
    return bool(mallopt(ctypes.c_int(M_ARENA_MAX), ctypes.c_int(wanted)))


def child_env() -> dict[str, str]:
    """MALLOC_ARENA_MAX for a child process (read by glibc before any Python code runs)."""
    wanted = arena_max()
    return {"MALLOC_ARENA_MAX": str(wanted)} if wanted else {}
