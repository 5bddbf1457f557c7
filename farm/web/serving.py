"""Serving an ASGI app with uvicorn, on a port of its own or on a listening socket its launcher bound.

A launcher that picks a free port and lets the child bind it later races every outgoing connection on
the machine: connect() takes its local port from the same ephemeral range, and a server cannot bind a
port a live connection holds (uvicorn then exits 3 at start; CI met it). So LocalFarm binds each
server's socket itself and hands it down (`--fd`); the child serves on it. Built with socket(fileno=)
so the socket keeps its real family: uvicorn's own `--fd` reads it as AF_UNIX, and asyncio then leaves
TCP_NODELAY off every accepted connection.
"""

from __future__ import annotations

import socket
from typing import Any

API_OPTIONS: dict[str, Any] = {
    "log_level": "warning",
    "access_log": False,
    "timeout_keep_alive": 75,  # trainers hold pools of keep-alive connections
}
"""How the farm's API is served, by `farm api` and by the launcher alike."""


def bind_listening(host: str, port: int) -> socket.socket:
    """A TCP socket bound to host:port (0: a free port) that a child process can inherit."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.set_inheritable(True)
    return sock


def serve(app: Any, *, host: str, port: int, fd: int | None = None, **options: Any) -> None:
    """uvicorn.run(app, ...), or serve on the inherited socket `fd` when one is given."""
    import uvicorn

    if fd is None:
        uvicorn.run(app, host=host, port=port, **options)
        return
    sock = socket.socket(fileno=fd)
    uvicorn.Server(uvicorn.Config(app, **options)).run(sockets=[sock])
