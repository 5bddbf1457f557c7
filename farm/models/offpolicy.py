"""The off-policy lag a trainer's consumer measured at batch assembly, as it reports it to the farm's gauges
(POST /metrics/offpolicy; the DAPO consumer sends one per batch, farm/client/staleness.py measures it)."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

COUNT_MAX = 10**9
"""Bound of one report's counts (they are added to Redis counters, 64-bit)."""


class LagStats(BaseModel):
    """One part of the off-policy lag over a batch's samples (those whose versions / times are known)."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    samples: int = Field(0, ge=0, le=COUNT_MAX)
    versions_max: int | None = Field(None, ge=0, le=COUNT_MAX)
    versions_mean: float | None = Field(None, ge=0)
    seconds_max: float | None = Field(None, ge=0)
    seconds_mean: float | None = Field(None, ge=0)


class OffPolicyReport(BaseModel):
    """One batch's lag, split into the part gathered while generating (in flight) and while waiting for the
    batch (in queue), and what the bound did to stale samples."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    run_id: str = Field(min_length=1, max_length=200, pattern=r"^[A-Za-z0-9._:@-]+$")
    policy_version: int | None = Field(None, ge=0, le=2**53)
    in_flight: LagStats = Field(default_factory=LagStats)
    in_queue: LagStats = Field(default_factory=LagStats)
    withheld: int = Field(0, ge=0, le=COUNT_MAX)
    discarded: int = Field(0, ge=0, le=COUNT_MAX)
    dropped_groups: int = Field(0, ge=0, le=COUNT_MAX)
