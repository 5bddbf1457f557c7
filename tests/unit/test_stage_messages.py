"""Stage messages built for a Lua LPUSH are what Celery's own send_task puts on the same list."""

from __future__ import annotations

import base64
import json
import os
import socket
from collections.abc import Iterator

import pytest
import redis
from celery import Celery

from farm.celery_app import create_app
from farm.embedded_redis import EmbeddedRedis
from farm.jobs.dispatch import broker_priority
from farm.jobs.messages import StageMessages
from farm.settings import get_settings

# Fields that differ between any two publishes of the same task (fresh ids and timestamps).
PER_PUBLISH = {"delivery_tag", "reply_to"}


@pytest.fixture(scope="module")
def quiet_redis() -> Iterator[EmbeddedRedis]:
    """A Redis of this module's own: the session's may have a farm's workers taking messages off it."""
    with EmbeddedRedis() as server:
        yield server


@pytest.fixture
def redis_url(quiet_redis: EmbeddedRedis) -> str:
    redis.Redis.from_url(quiet_redis.url).flushdb()
    return quiet_redis.url


@pytest.fixture
def celery(redis_url: str, monkeypatch: pytest.MonkeyPatch) -> Iterator[Celery]:
    """The farm's Celery app on the module's Redis."""
    monkeypatch.setenv("FARM_REDIS_URL", redis_url)
    get_settings.cache_clear()
    yield create_app()
    get_settings.cache_clear()


def published_by_celery(client: redis.Redis, celery: Celery, **options: object) -> tuple[str, dict]:
    """(list key, message) of what send_task put on its queue's list (the database starts empty)."""
    celery.send_task("farm.run", args=("job-1",), task_id="job-1.run", ignore_result=True, **options)
    lists = [key for key in client.keys("*") if client.type(key) == b"list"]
    assert len(lists) == 1, lists
    return lists[0].decode(), json.loads(client.rpop(lists[0]))


def comparable(message: dict) -> dict:
    props = {k: v for k, v in message["properties"].items() if k not in PER_PUBLISH}
    headers = {k: v for k, v in message["headers"].items() if k != "origin"}
    body = json.loads(base64.b64decode(message["body"]))
    return {**message, "properties": props, "headers": headers, "body": body}


@pytest.mark.parametrize(("queue", "priority"), [("run", 0), ("run.node-a", 0), ("init", 7), ("init", 9)])
def test_a_built_message_is_the_one_celery_publishes(
    redis_url: str, celery: Celery, queue: str, priority: int
) -> None:
    client = redis.Redis.from_url(redis_url)
    key, theirs = published_by_celery(client, celery, queue=queue, priority=broker_priority(priority))
    ours = StageMessages(celery).build("job-1", "run", "job-1.run", queue, broker_priority(priority))
    assert ours.key == key
    assert comparable(json.loads(ours.payload)) == comparable(theirs)


def test_a_pushed_message_decodes_as_the_stage_task(redis_url: str, celery: Celery) -> None:
    message = StageMessages(celery).build("job-2", "eval", "job-2.eval", "eval")
    decoded = json.loads(message.payload)
    args, kwargs, embed = json.loads(base64.b64decode(decoded["body"]))
    assert (args, kwargs) == (["job-2"], {})
    assert embed["chain"] is None  # each stage's end sends the next itself
    assert decoded["headers"]["task"] == "farm.eval"
    assert decoded["headers"]["origin"] == f"{os.getpid()}@{socket.gethostname()}"
    assert decoded["properties"]["delivery_info"] == {"exchange": "", "routing_key": "eval"}
    assert message.key == "eval"


def test_delivery_tags_are_unique(redis_url: str, celery: Celery) -> None:
    builder = StageMessages(celery)
    tags = {
        json.loads(builder.build("j", "init", "j.init", "init").payload)["properties"]["delivery_tag"]
        for _ in range(50)
    }
    assert len(tags) == 50


def test_queue_keys_name_every_list_a_message_can_land_on(redis_url: str, celery: Celery) -> None:
    builder = StageMessages(celery)
    keys = builder.queue_keys("init")
    assert keys[0] == "init"
    for priority in range(10):
        assert builder.build("j", "init", "j.init", "init", broker_priority(priority)).key in keys
