"""The Celery app: queues, run-queue locality and the at-least-once settings.

Queues: `init` (global), `run` (global) and `run.<node>` (the node that initialised a sandbox runs it),
`eval` (global). A worker started with `-Q run` also consumes its node's `run.<node>` queue.
"""

from __future__ import annotations

import logging
import os
import sys
import warnings
from functools import cached_property
from typing import Any

from celery import Celery
from celery.exceptions import CPendingDeprecationWarning
from celery.signals import celeryd_after_setup
from kombu import Exchange, Queue

from farm.celery_worker import FarmWorker
from farm.flower_guard import guard_flower
from farm.outage import redis_outage
from farm.redis_clients import broker_url, celery_conf, celery_transport_options
from farm.settings import get_settings
from farm.workers import live_run_queues

DEFAULT_CONCURRENCY = 8
"""Stages a worker runs at once when its command line says nothing (`-c` overrides)."""


def node_run_queue(node: str) -> str:
    return f"run.{node}"


def run_queue_here(node_local: bool = False) -> str:
    """This node's own run queue when a live worker consumes it, else the global one; always this
    node's for a handler whose run needs what init made here (`node_local`): run on another node it
    would fail to attach the sandbox. The registry can miss a live run worker (a late heartbeat over a
    lossy link); if none consumes the queue, the stall sweep sends the job again from init.

    The run stage is sent by the init worker when init finishes, so "this node" is the node that
    prepared the sandbox."""
    local = node_run_queue(get_settings().node)
    return local if node_local or local in live_run_queues() else "run"


def stage_queue(name: str) -> Queue:
    """A queue under an exchange of its own name (the banner then shows `exchange=run key=run` for the
    run queue, not the default queue's `init`). Stage messages are pushed to the queue's list by the
    farm's scripts (farm/jobs/messages.py), so the exchange routes nothing; it only has to be true."""
    return Queue(name, Exchange(name, type="direct"), routing_key=name)


class FarmCelery(Celery):  # type: ignore[misc]  # Celery ships no type hints
    """The farm's app: its `celery worker` is farm/celery_worker.py's, whatever flags started it."""

    @cached_property
    def Worker(self) -> type[FarmWorker]:
        worker: type[FarmWorker] = self.subclass_with_self(FarmWorker)
        return worker


def create_app() -> Celery:
    settings = get_settings()
    celery = FarmCelery("farm", broker=broker_url(settings), include=["tasks.stages"])
    # With a sentinel:// URL: the farm's Sentinel transport. (Stage messages are not published through
    # kombu: the farm's Lua scripts enqueue them, over clients that retry through outages.)
    conf: dict[str, Any] = celery_conf(settings)
    celery.conf.update(
        task_serializer="json",
        accept_content=["json"],
        result_serializer="json",
        task_ignore_result=True,
        task_acks_late=True,
        task_reject_on_worker_lost=True,
        worker_prefetch_multiplier=1,
        task_queues=[stage_queue("init"), stage_queue("run"), stage_queue("eval")],
        task_default_queue="init",
        task_create_missing_queues=True,
        broker_connection_retry_on_startup=True,
        broker_transport_options={
            # No ack emulation: the job's lease (farm/jobs/scripts.py) is what recovers a stage whose
            # worker died, and the stall sweep (tasks/reaper.py) a message lost before its stage began.
            # kombu's unacked hash and visibility timeout would be a second recovery path with its own
            # redeliveries, at eight Redis commands per message.
            "ack_emulation": False,
            # An idle worker's BRPOP returns every 2 s (kombu's default is 1): one command less a
            # second per worker; a message still wakes it at once.
            "polling_interval": 2,
            # With a sentinel:// URL: the master's name and how to reach the sentinels.
            **celery_transport_options(settings),
        },
        # `celery -A farm worker` without -P/-c: the farm's stages wait on sandboxes and models, so a
        # threads pool of a fixed size, not Celery's prefork of one process per core (memory by cores).
        worker_pool="threads",
        worker_concurrency=DEFAULT_CONCURRENCY,
        worker_hijack_root_logger=False,
        worker_send_task_events=False,
        task_send_sent_event=False,
        **conf,
    )
    return celery


guard_flower(sys.argv, os.environ)
app = create_app()


class BrokerOutageFilter(logging.Filter):
    """Celery's consumer logs a lost broker connection and then every reconnect attempt (a line, or
    with its retry hint three, every few seconds of an outage): told once instead, by redis_outage."""

    def filter(self, record: logging.LogRecord) -> bool:
        message = record.getMessage()
        if message.startswith(("consumer: Connection to broker lost", "consumer: Cannot connect to")):
            args = record.args if isinstance(record.args, tuple) else ()
            errors = [arg for arg in args if isinstance(arg, BaseException)]
            redis_outage.lost("broker", errors[0] if errors else message.splitlines()[0])
            return False
        return True


def quiet_broker_outages() -> None:
    """In a worker, once Celery has set its logging and warning filters up."""
    logging.getLogger("celery.worker.consumer.consumer").addFilter(BrokerOutageFilter())
    # Celery warns on every connection loss that it will cancel running tasks then in 6.0 (a 6-line
    # warning): the farm's stages are recovered through their leases either way, not by the broker.
    warnings.filterwarnings("ignore", category=CPendingDeprecationWarning, message=r"\s*In Celery 5.1")


@celeryd_after_setup.connect
def _consume_node_run_queue(sender: str, instance: Any, **kwargs: Any) -> None:
    quiet_broker_outages()
    queues = instance.app.amqp.queues
    if "run" in queues.consume_from:
        queues.select_add(stage_queue(node_run_queue(get_settings().node)))
    from farm.handler.registry import prewarm_all

    stages = {name.split(".")[0] for name in queues.consume_from}
    prewarm_all(stages & {"init", "run", "eval"})
