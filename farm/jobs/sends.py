"""Clearing a job's pending-send mark once the message for its next stage is really published.

Every state change after which a stage must be sent (submit, a stage done, a stage reaped or given
back) marks the job in `farm:pending_sends` in the same Lua call. Celery's `after_task_publish`
fires in whichever process published the stage (API, worker continuing a chain, reaper) and clears
the mark. A mark that stays means that process died in between: the reaper sends the stage again.
"""

from __future__ import annotations

import logging
from functools import lru_cache
from typing import Any

import redis

from farm import keys
from farm.models.results import STAGES
from farm.settings import get_settings, redis_retry_options

log = logging.getLogger(__name__)
STAGE_TASKS = {f"farm.{stage}" for stage in STAGES}


@lru_cache
def _client() -> redis.Redis:
    return redis.Redis.from_url(get_settings().redis_url, **redis_retry_options())


def on_published(sender: str | None = None, body: Any = None, **kwargs: Any) -> None:
    if sender not in STAGE_TASKS:
        return
    try:
        job_id = body[0][0]  # protocol 2: (args, kwargs, embed); stage tasks take the job id alone
        _client().zrem(keys.PENDING_SENDS, job_id)
    except (IndexError, TypeError, KeyError):
        log.warning("could not read the job id of a published %s", sender)
    except redis.RedisError:
        log.warning("could not clear the pending send of a published %s", sender, exc_info=True)
