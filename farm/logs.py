"""Log lines with their time: one format for the API (uvicorn's loggers included) and the CLI."""

from __future__ import annotations

import logging
import sys

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
