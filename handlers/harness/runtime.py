"""The sandbox a harness runs in: the task's runtime (egress only when it asks for `network`), its relay
port standing for the model gateway (handlers/harness/gateway_access.py: the harness reaches its own
session's model routes and nothing else of the farm), and no address-space cap (Node's V8 and
WebAssembly reserve far more virtual memory than they use; an 8 GB RLIMIT_AS makes `fetch` fail at
start-up)."""

from __future__ import annotations

from typing import Any

from containers import ResourceLimits
from handlers.harness.gateway_access import RELAY_PORT

HARNESS_LIMITS = ResourceLimits(address_space_mb=None)


def sandbox_overrides() -> dict[str, Any]:
    return {"relay_port": RELAY_PORT, "limits": HARNESS_LIMITS}
