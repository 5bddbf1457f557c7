"""A test's private Redis is its own: a chosen port that another process binds first is not shared.

Under xdist every test process picks ports from the same kernel range, and `free_port` releases the port it
found before the server binds it: two processes can be told the same one. The server that loses the bind
exits, and a readiness ping in that moment reached the winner, so two tests ran on one Redis."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from farm import embedded_redis
from farm.embedded_redis import EmbeddedRedis


@pytest.fixture
def taken() -> Iterator[EmbeddedRedis]:
    server = EmbeddedRedis().start()
    yield server
    server.stop()


def test_a_chosen_port_taken_before_the_bind_is_replaced(
    taken: EmbeddedRedis, monkeypatch: pytest.MonkeyPatch
) -> None:
    offered = iter([taken.port])
    real = embedded_redis.free_port
    monkeypatch.setattr(embedded_redis, "free_port", lambda: next(offered, None) or real())
    mine = EmbeddedRedis().start()
    try:
        assert mine.port != taken.port
        answering = redis.Redis.from_url(mine.url)
        assert int(answering.info("server")["process_id"]) == mine.process.pid  # type: ignore[union-attr]
        answering.close()
    finally:
        mine.stop()


def test_a_given_port_that_is_taken_is_an_error_not_a_shared_server(taken: EmbeddedRedis) -> None:
    with pytest.raises(RuntimeError, match=f"could not bind port {taken.port}"):
        EmbeddedRedis(port=taken.port).start()
