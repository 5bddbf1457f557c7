"""Log lines with their time: one format for the API (uvicorn's loggers included) and the CLI."""

from __future__ import annotations

import logging
import sys
import time

FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
UVICORN_LOGGERS = ("uvicorn", "uvicorn.error", "uvicorn.access")


def configure(level: int = logging.WARNING) -> None:
    """A timestamped handler on the root logger when it has none (uvicorn configures only its own
    loggers, so the farm's lines went out through logging's last resort, without time), and the same
    format on uvicorn's handlers. Idempotent."""
    formatter = logging.Formatter(FORMAT)
    root = logging.getLogger()
    if not root.handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(formatter)
        root.addHandler(handler)
        root.setLevel(level)
    for name in UVICORN_LOGGERS:
        for existing in logging.getLogger(name).handlers:
            existing.setFormatter(formatter)


def stamp(now: float | None = None) -> str:
    """The time as logging's `%(asctime)s` writes it (`2026-01-01 12:00:00,123`), for lines printed
    without a logger (a command's start line, Celery's banner and shutdown lines)."""
    now = time.time() if now is None else now
    return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now)) + f",{int(now % 1 * 1000):03d}"
