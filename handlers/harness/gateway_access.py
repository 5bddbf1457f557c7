"""How a harness in its sandbox reaches exactly its own gateway session and nothing else.

The sandbox has no route to the host. Its relay port (containers.host_relay) is served for the length of
the run, carrying the harness's requests to the gateway only when they are model calls of this job's
session: not another session, not the session's reward/end/export/completions routes (a policy must
not score itself), not the farm's API.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from urllib.parse import urlsplit

from containers import Sandbox
from containers.host_relay import grant

RELAY_PORT = 18080
"""The port on the sandbox's own loopback that stands for the gateway (any port would do: the sandbox's
network namespace is its own)."""
MANAGEMENT = frozenset({"", "reward", "end", "export", "completions"})


def allows(session_path: str, request_path: str) -> bool:
    """Whether a request path is a model call inside `session_path` (the session's URL path)."""
    path = request_path.split("?", 1)[0]
    if "%" in path or "\\" in path or not path.startswith(session_path + "/"):
        return False
    rest = path[len(session_path) + 1 :]
    segments = rest.split("/")
    return ".." not in segments and "." not in segments and segments[0] not in MANAGEMENT


@contextlib.contextmanager
def session_access(sandbox: Sandbox, base_url: str) -> Iterator[str]:
    """The session's base URL as the harness inside `sandbox` must use it, served while the block runs."""
    url = urlsplit(base_url)
    if url.hostname is None:
        raise ValueError(f"gateway base URL without a host: {base_url!r}")
    port = url.port or (443 if url.scheme == "https" else 80)
    session_path = url.path.rstrip("/")
    with grant(sandbox.info, (url.hostname, port), lambda path: allows(session_path, path)):
        yield f"http://127.0.0.1:{RELAY_PORT}{session_path}"
