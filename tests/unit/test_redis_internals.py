"""farm/redis_clients.py overrides connection internals of redis-py (pyproject pins the major version):
if an upgrade renames or re-signs them, this fails before a failover does."""

from __future__ import annotations

import inspect

import pytest
from redis.asyncio.sentinel import SentinelManagedConnection as AsyncSentinelManagedConnection
from redis.sentinel import SentinelManagedConnection

from farm.redis_clients import AsyncMasterConnection, MasterConnection


@pytest.mark.parametrize(
    ("ours", "theirs"),
    [(MasterConnection, SentinelManagedConnection), (AsyncMasterConnection, AsyncSentinelManagedConnection)],
)
def test_overridden_internals_still_exist_with_the_same_signature(ours: type, theirs: type) -> None:
    for name in ("connect_check_health", "connect_to", "read_response", "_connect_retry"):
        assert hasattr(theirs, name), f"redis-py no longer has {theirs.__name__}.{name}"
    for name in ("connect_check_health", "connect_to"):
        theirs_params = list(inspect.signature(getattr(theirs, name)).parameters)
        ours_params = list(inspect.signature(getattr(ours, name)).parameters)
        assert ours_params == theirs_params, (name, ours_params, theirs_params)
