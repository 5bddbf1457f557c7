"""rollout-farm: rollout-as-a-service for RL of multi-turn LLM agents, on Celery and Redis.

`celery -A farm worker -Q init|run|eval` finds the Celery app as `farm.app`; it is created on first
access so that importing `farm.models` or the client does not configure Celery.
"""

from __future__ import annotations

import os
from typing import Any

# The farm uses transformers for tokenizers and chat templates only; without torch (the default
# install) transformers would advise "PyTorch was not found" on every import, in every process.
os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")

__version__ = "0.1.0"


def __getattr__(name: str) -> Any:
    if name in ("app", "celery"):
        from farm.celery_app import app

        return app
    raise AttributeError(name)
