"""The sandbox a harness runs in: the task's runtime with the network on (the harness must reach the
gateway) and no address-space cap (Node's V8 and WebAssembly reserve far more virtual memory than they
use; an 8 GB RLIMIT_AS makes `fetch` fail at start-up)."""

from __future__ import annotations

from typing import Any

from containers import ResourceLimits

HARNESS_LIMITS = ResourceLimits(address_space_mb=None)


def sandbox_overrides() -> dict[str, Any]:
    return {"network": True, "limits": HARNESS_LIMITS}
