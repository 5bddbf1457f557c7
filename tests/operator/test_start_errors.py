"""A farm starts once (`with farm.start()` once started a second API that died at its bind: CI's "api
exited with code 3 while starting"), a farm that cannot start says why (the error of a child that died
while starting ends with its own last lines), and the API starts on every kind of Redis URL it accepts
(its outage watch once assumed a single connection pool, so the API died at start on a Redis Cluster)."""

from __future__ import annotations

import pytest
from redis.asyncio.retry import Retry

from farm.api.outage_guard import RedisWatch
from farm.launcher import LocalFarm, WorkerSpec
from farm.redis_clients import async_redis_client, redis_client
from farm.settings import Settings


def test_a_child_dying_at_start_is_explained_by_its_own_output() -> None:
    farm = LocalFarm(workers=[WorkerSpec("init,run,eval", concurrency=1)], llm_args=["--no-such-option"])
    with pytest.raises(RuntimeError) as failed:
        farm.start(timeout_s=60)
    message = str(failed.value)
    assert "llm0 exited with code 2 while starting" in message
    assert "No such option" in message  # click's own line, read back from the child's output
    assert farm._own_logs is None  # the private log directory is gone with the farm


def test_a_farm_entered_after_start_is_started_once() -> None:
    """`with farm.start(...)` once started the farm twice: a second API raced the first for its port."""
    farm = LocalFarm(workers=[WorkerSpec("init,run,eval", concurrency=1)], llm_policy=None)
    with farm.start(timeout_s=60) as entered:
        assert entered is farm and [name for name, _ in farm.children()] == ["api", "worker-init+run+eval-0"]
        with pytest.raises(RuntimeError, match="already running"):
            farm.start()
    assert farm.children() == []


@pytest.mark.parametrize("url", ["redis://127.0.0.1:1/0", "redis+cluster://127.0.0.1:1"])
def test_the_outage_watch_is_made_for_every_url_kind(url: str) -> None:
    watch = RedisWatch.create(Settings(redis_url=url))
    assert watch.r is not None


def test_a_probe_client_never_retries() -> None:
    """redis-py's own default retries three times: a probe asking whether Redis answers must not."""
    plain = Settings(redis_url="redis://127.0.0.1:1/0")
    for client in (
        redis_client(settings=plain, retry=False),
        async_redis_client(settings=plain, retry=False),
    ):
        assert client.connection_pool.connection_kwargs["retry"].get_retries() == 0
    cluster = async_redis_client(settings=Settings(redis_url="redis+cluster://127.0.0.1:1"), retry=False)
    assert isinstance(cluster.retry, Retry) and cluster.retry.get_retries() == 0
