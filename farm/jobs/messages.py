"""Stage task messages, built ahead of sending so that a Lua script can enqueue one in the same atomic
step that records the job or ends the stage before it (farm/jobs/scripts.py).

That is the farm's chain init → run → eval: the link to the next stage is written by the script that
ends a stage, so no crash can fall between "stage done" and "next stage sent", and a hop costs one
Redis round trip instead of two. The message is exactly what `Celery.send_task` would publish: Celery
builds the task message, kombu's own Redis channel serializes, encodes and names the list (queue plus
priority step) it goes to; only the final LPUSH is ours. tests/unit/test_stage_messages.py checks the
result against a message published by Celery itself.
"""

from __future__ import annotations

import os
import socket
import threading
from dataclasses import dataclass
from typing import Any

from celery import Celery
from kombu.serialization import dumps as serialize
from kombu.utils.json import dumps as json_dumps

PERSISTENT = 2
"""AMQP delivery mode 2, as Celery sets it by default."""


@dataclass(frozen=True)
class QueuedMessage:
    """A stage message ready to be pushed: `LPUSH key payload` is what kombu's publish would do."""

    key: str
    payload: str


class StageMessages:
    """Builds stage messages for one Celery app (one per process; safe to share between threads)."""

    def __init__(self, celery: Celery) -> None:
        self.celery = celery
        self._connection: Any = None
        self._channel: Any = None
        self._pid = -1
        self._lock = threading.Lock()
        self._origin = ""

    def build(
        self,
        job_id: str,
        stage: str,
        task_id: str,
        queue: str,
        priority: int = 0,
    ) -> QueuedMessage:
        """The message of task `farm.<stage>(job_id)` for `queue` at kombu `priority` (0 is read first)."""
        channel = self._format_channel()
        args = (job_id,)
        headers, properties, body, _ = self.celery.amqp.create_task_message(
            task_id,
            f"farm.{stage}",
            args,
            {},
            ignore_result=True,
            argsrepr=repr(args),
            kwargsrepr="{}",
            origin=self._origin,
        )
        content_type, content_encoding, data = serialize(body, serializer="json")
        properties["delivery_mode"] = PERSISTENT
        message = channel.prepare_message(data, priority, content_type, content_encoding, headers, properties)
        channel._inplace_augment_message(message, "", queue)  # base64 body, delivery tag, routing
        return QueuedMessage(channel._q_for_pri(queue, priority), json_dumps(message))

    def queue_keys(self, queue: str) -> list[str]:
        """Every Redis list kombu keeps for `queue`, one per priority step (where `build` may put a
        message)."""
        channel = self._format_channel()
        return [channel._q_for_pri(queue, step) for step in channel.priority_steps]

    @property
    def ready(self) -> bool:
        """Whether `build` can run without I/O (the channel is open in this process)."""
        return self._pid == os.getpid()

    def open(self) -> None:
        """Opens the kombu channel `build` uses for the message layout (one Redis round trip; no I/O after
        that). One per process: a forked pool child opens its own. Idempotent."""
        if self.ready:
            return
        with self._lock:
            if not self.ready:
                self._connection = self.celery.connection_for_write()
                self._channel = self._connection.default_channel
                self._origin = f"{os.getpid()}@{socket.gethostname()}"  # who sent it, as Celery says
                self._pid = os.getpid()

    def _format_channel(self) -> Any:
        self.open()
        return self._channel
