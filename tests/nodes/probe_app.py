"""The farm's Celery app with the `probe` handler registered (tests/nodes/probe.py)."""

from __future__ import annotations

import tests.nodes.probe  # noqa: F401  (registers the handler)
from farm.celery_app import app

__all__ = ["app"]
