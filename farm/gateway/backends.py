"""Where model calls go: the farm's Redis pool, or a fixed list for a gateway run on its own."""

from __future__ import annotations

import time
from typing import Protocol

from farm.models import BackendInfo


class BackendSource(Protocol):
    """The async surface of `farm.pool.AsyncBackendPool` that the gateway uses."""

    async def acquire(self, key: str) -> BackendInfo | None: ...
    async def release(self, key: str) -> None: ...
    async def mark_unhealthy(self, address: str) -> None: ...
    async def call_started(self, address: str) -> None: ...
    async def call_finished(self, address: str) -> None: ...


class StaticBackends:
    """In-process backends for `farm gateway --backend URL`: sticky per key, least-assigned first.

    An unhealthy backend is skipped for `cooldown_s`, then tried again.
    """

    def __init__(self, addresses: list[str], cooldown_s: float = 10.0) -> None:
        if not addresses:
            raise ValueError("give at least one backend address")
        self.backends = {a.rstrip("/"): BackendInfo(address=a.rstrip("/")) for a in addresses}
        self.sticky: dict[str, str] = {}
        self.unhealthy_until: dict[str, float] = {}
        self.cooldown_s = cooldown_s

    def _healthy(self, address: str) -> bool:
        return self.unhealthy_until.get(address, 0.0) <= time.monotonic()

    async def acquire(self, key: str) -> BackendInfo | None:
        current = self.sticky.get(key)
        if current and self._healthy(current):
            return self.backends[current]
        if current:
            await self.release(key)
        healthy = [b for b in self.backends.values() if self._healthy(b.address)]
        if not healthy:
            return None
        chosen = min(healthy, key=lambda b: (b.assigned, b.in_flight))
        chosen.assigned += 1
        self.sticky[key] = chosen.address
        return chosen

    async def release(self, key: str) -> None:
        address = self.sticky.pop(key, None)
        if address:
            self.backends[address].assigned -= 1

    async def mark_unhealthy(self, address: str) -> None:
        self.unhealthy_until[address.rstrip("/")] = time.monotonic() + self.cooldown_s

    async def call_started(self, address: str) -> None:
        self.backends[address.rstrip("/")].in_flight += 1

    async def call_finished(self, address: str) -> None:
        self.backends[address.rstrip("/")].in_flight -= 1
