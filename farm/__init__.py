"""rollout-farm: rollout-as-a-service for RL of multi-turn LLM agents, on Celery and Redis.

`celery -A farm worker -Q init|run|eval` finds the Celery app as `farm.app`; it is created on first
access so that importing `farm.models` or the client does not configure Celery.
"""

from __future__ import annotations

from typing import Any

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name in ("app", "celery"):
        from farm.celery_app import app

        return app
    raise AttributeError(name)
