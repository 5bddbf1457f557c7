"""Framing shared by the execution server and its clients: one JSON object per line.

Request: {"id": int, "op": str, "args": {...}}. Response: {"id": int, "ok": true, "result": ...} or
{"id": int, "ok": false, "error": str}.
"""

from __future__ import annotations

import json

TYPE_CHECKING = False  # the server avoids importing typing at start-up
if TYPE_CHECKING:
    from typing import Any

SOCKET_NAME = "exec.sock"
RELAY_SOCKET_NAME = "relay.sock"
"""In the control directory: the host end of the sandbox's relay port, served while access is granted."""
CONTROL_DIR = "/run/farm"
"""Where the sandbox sees its control directory (socket, server log); outside the agent's workspace."""


def encode(message: dict[str, Any]) -> bytes:
    return json.dumps(message, separators=(",", ":")).encode() + b"\n"


def decode(line: bytes) -> dict[str, Any]:
    message = json.loads(line)
    if not isinstance(message, dict):
        raise ValueError("a message must be a JSON object")
    return message


def parse_address(address: str) -> tuple[str, str | tuple[str, int]]:
    """`unix:/path` or `tcp:host:port` to (family, socket address)."""
    kind, _, rest = address.partition(":")
    if kind == "unix" and rest:
        return "unix", rest
    if kind == "tcp":
        host, _, port = rest.rpartition(":")
        if host and port.isdigit():
            return "tcp", (host, int(port))
    raise ValueError(f"not an execution server address: {address!r}")
