"""The sandbox a harness runs in: the task's runtime with the network on (the harness must reach the
gateway) and no address-space cap (Node's V8 and WebAssembly reserve far more virtual memory than they
use; an 8 GB RLIMIT_AS makes `fetch` fail at start-up)."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from containers import ResourceLimits
from farm.settings import get_settings

HARNESS_LIMITS = ResourceLimits(address_space_mb=None)


def gateway_ports(base: str) -> list[int]:
    """The host-loopback port of the model gateway, granted to the harness sandbox (its network reaches
    nothing else on the host); none when the gateway is elsewhere (reached by ordinary egress)."""
    url = urlsplit(base)
    host = (url.hostname or "").lower()
    if host in ("localhost", "::1") or host.startswith("127."):
        return [url.port or (443 if url.scheme == "https" else 80)]
    return []


def sandbox_overrides() -> dict[str, Any]:
    return {
        "network": True,
        "limits": HARNESS_LIMITS,
        "host_ports": gateway_ports(get_settings().gateway_base),
    }
