"""The sandbox a harness runs in: the task's runtime (egress only when it asks for `network`), its relay
port standing for the model gateway (handlers/harness/gateway_access.py: the harness reaches its own
session's model routes and nothing else of the farm), and no address-space cap (Node's V8 and
WebAssembly reserve far more virtual memory than they use; an 8 GB RLIMIT_AS makes `fetch` fail at
start-up)."""

from __future__ import annotations

import os
from typing import Any

from containers import ReadOnlyBind, ResourceLimits
from farm.settings import get_settings
from handlers.harness.clis import cli_cache
from handlers.harness.gateway_access import RELAY_PORT

HARNESS_LIMITS = ResourceLimits(address_space_mb=None)


def sandbox_overrides() -> dict[str, Any]:
    # The CLI cache is granted too: it defaults to ~/.cache, which sandboxes do not see (homes are
    # hidden), so a CLI `farm demo --harness` installed there would exit 127.
    granted = [*get_settings().harness_cli_dirs.split(":"), str(cli_cache())]
    dirs = list(dict.fromkeys(d for d in granted if d and os.path.isdir(d)))
    binds = [ReadOnlyBind(source=d, target=d) for d in dirs]
    return {"relay_port": RELAY_PORT, "limits": HARNESS_LIMITS, "ro_binds": binds}
