"""Trainer-side clients of the farm: plain HTTP clients and the efficient DAPO consumer."""

from farm.client.async_client import AsyncFarmClient
from farm.client.calls import CancelAnswer, JobAccepted
from farm.client.dapo import AsyncDapoConsumer, Batch, BatchStats, DapoConfig, DapoConsumer
from farm.client.errors import FarmError, FarmTimeout, FarmUnavailable
from farm.client.groups import FailurePolicy, Group, GroupBook, StragglerPolicy
from farm.client.polling import PollPolicy
from farm.client.staleness import StaleSamples
from farm.client.sync_client import FarmClient

__all__ = [
    "AsyncDapoConsumer",
    "AsyncFarmClient",
    "Batch",
    "BatchStats",
    "CancelAnswer",
    "DapoConfig",
    "DapoConsumer",
    "FailurePolicy",
    "FarmClient",
    "FarmError",
    "FarmTimeout",
    "FarmUnavailable",
    "Group",
    "GroupBook",
    "JobAccepted",
    "PollPolicy",
    "StaleSamples",
    "StragglerPolicy",
]
