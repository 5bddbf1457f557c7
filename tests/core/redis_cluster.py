"""A real local Redis Cluster for tests: farm/embedded_redis.py's EmbeddedCluster (three masters on free
loopback ports). Never the machine's own Redis."""

from __future__ import annotations

import redis

from farm.embedded_redis import EmbeddedCluster, redis_server_binary


def missing_binaries() -> str | None:
    try:
        redis_server_binary()
    except FileNotFoundError as exc:
        return str(exc)
    return None


class LocalCluster(EmbeddedCluster):
    def start(self, timeout_s: float = 20.0) -> LocalCluster:
        super().start(timeout_s)
        return self

    def client(self) -> redis.RedisCluster:
        return redis.RedisCluster(host="127.0.0.1", port=self.ports[0], decode_responses=True)
