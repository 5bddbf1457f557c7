"""A worker that runs sandboxes says at start, one line each, which sandbox capabilities this host cannot
give (containers.local.host_problems): a job asking for one then fails at once with the same line."""

from __future__ import annotations

import logging
from typing import Any

from celery.signals import worker_ready

log = logging.getLogger(__name__)


@worker_ready.connect
def _check_sandbox_capabilities(sender: Any = None, **kwargs: Any) -> None:
    from containers.local import host_problems

    for problem in host_problems():
        log.warning("%s", problem)
