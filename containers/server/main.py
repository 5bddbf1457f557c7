"""Entry point of the execution server inside a sandbox (started by a runtime, not by hand).

Its one argument is a JSON object (ServerConfig fields); argparse alone would add a tenth to start-up.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from containers.server.app import ExecService, Handler, UnixServer, _Server, serve
from containers.server.limits import apply_rlimits, make_undumpable, restore_default_signals

DEFAULTS: dict[str, Any] = {
    "socket": None,  # Unix socket path to listen on (required)
    "ready_fd": None,  # write "ready -" here once listening
    "workdir": "/workspace",
    "limits": {},  # ResourceLimits fields
    "warm": [],  # tools to start at once
    "ttl": None,  # exit after this many seconds
    "python": None,  # interpreter for the IPython kernel
    "relay": None,  # [port, unix socket path]: carry 127.0.0.1:port to the host's relay socket
}


def parse_config(argv: list[str]) -> dict[str, Any]:
    if len(argv) != 1:
        raise SystemExit("usage: python -m containers.server '<json config>'")
    config = {**DEFAULTS, **json.loads(argv[0])}
    unknown = set(config) - set(DEFAULTS)
    if unknown or not config["socket"]:
        raise SystemExit(f"bad config: unknown keys {sorted(unknown)} or no socket")
    return config


def main(argv: list[str] | None = None) -> None:
    config = parse_config(sys.argv[1:] if argv is None else argv)
    make_undumpable()  # before anything the rollout could later take from it exists
    apply_rlimits(config["limits"])
    restore_default_signals()
    workdir = str(config["workdir"])
    os.makedirs(workdir, exist_ok=True)
    os.chdir(workdir)

    def shutdown() -> None:
        try:
            service.tools.close()
        finally:
            os._exit(0)

    python = str(config["python"] or sys.executable)
    service = ExecService(workdir, dict(os.environ), python, on_shutdown=shutdown)
    socket_path = str(config["socket"])
    if os.path.exists(socket_path):
        os.unlink(socket_path)
    old_umask = os.umask(0o077)
    try:
        servers: list[_Server] = [UnixServer(socket_path, Handler)]
    finally:
        os.umask(old_umask)
    if config["relay"]:
        from containers.server.relay import start_relay

        port, relay_socket = config["relay"]
        start_relay(int(port), str(relay_socket))
    service.set_ttl(config["ttl"])
    service.tools.warm(list(config["warm"]))
    if config["ready_fd"] is not None:
        ready_fd = int(config["ready_fd"])
        os.write(ready_fd, b"ready -\n")
        os.close(ready_fd)
    serve(service, servers)


if __name__ == "__main__":
    main()
