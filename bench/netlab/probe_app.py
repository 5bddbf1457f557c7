"""The farm's Celery app with the `probe` handler registered (bench/netlab/probe.py)."""

from __future__ import annotations

import bench.netlab.probe  # noqa: F401  (registers the handler)
from farm.celery_app import app

__all__ = ["app"]
