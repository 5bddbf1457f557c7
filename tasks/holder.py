"""What the READY buffer and the resume path need of a running stage's attempt (tasks/lifecycle.py's
`Attempt` is one): a protocol, so that those modules do not import the lifecycle that calls them."""

from __future__ import annotations

from typing import Protocol

from farm.jobs.store import JobStore


class StageHolder(Protocol):
    @property
    def store(self) -> JobStore: ...

    @property
    def job_id(self) -> str: ...

    @property
    def stage(self) -> str: ...

    @property
    def token(self) -> int: ...
