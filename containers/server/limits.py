"""Resource limits and signal dispositions the execution server sets on itself at start-up, inherited
by all it starts."""

from __future__ import annotations

import resource
import signal

MB = 1024 * 1024

# limit name (as in ResourceLimits) -> (rlimit, unit multiplier)
RLIMITS = {
    "address_space_mb": (resource.RLIMIT_AS, MB),
    "max_processes": (resource.RLIMIT_NPROC, 1),
    "cpu_seconds": (resource.RLIMIT_CPU, 1),
    "file_size_mb": (resource.RLIMIT_FSIZE, MB),
    "open_files": (resource.RLIMIT_NOFILE, 1),
}


def apply_rlimits(limits: dict[str, int | None]) -> dict[str, int]:
    """Set soft and hard limits (never above the current hard limit); returns what was applied."""
    applied = {}
    for name, value in limits.items():
        if value is None or name not in RLIMITS:
            continue
        which, unit = RLIMITS[name]
        wanted = int(value) * unit
        _, hard = resource.getrlimit(which)
        if hard != resource.RLIM_INFINITY:
            wanted = min(wanted, hard)
        resource.setrlimit(which, (wanted, wanted))
        applied[name] = wanted
    return applied


def restore_default_signals() -> None:
    """Undo an inherited SIG_IGN for SIGINT and SIGQUIT (a worker started in the background by a script
    ignores both, and exec keeps ignored signals ignored). Otherwise Ctrl-C on the bash tool's terminal
    would interrupt nothing: its timeouts and cancels rely on it."""
    for signum in (signal.SIGINT, signal.SIGQUIT):
        if signal.getsignal(signum) == signal.SIG_IGN:
            signal.signal(signum, signal.SIG_DFL)


def make_undumpable() -> bool:
    """PR_SET_DUMPABLE 0 on this process: the rollout's commands run as the same user, and could otherwise
    ptrace the server (rewrite its answers, take its socket) or read /proc/<pid>/{mem,fd,environ}. The
    commands it starts are dumpable again after their execve. `_ctypes` alone: `ctypes` would cost the
    server ~10x its import time at start-up. False where the call is not available."""
    try:
        import _ctypes

        handle = _ctypes.dlopen(None, 2)  # type: ignore[arg-type]  # None: the running process, RTLD_NOW
        prctl = _ctypes.dlsym(handle, "prctl")
        return bool(_ctypes.call_function(prctl, (4, 0, 0, 0, 0)) == 0)  # PR_SET_DUMPABLE, 0
    except (ImportError, OSError, AttributeError):
        return False
