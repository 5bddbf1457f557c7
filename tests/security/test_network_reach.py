"""Network: in both modes, no host loopback service (a real Redis, an HTTP API), no other sandbox's
server and no other sandbox's execution server is reachable."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator

import pytest

from containers.local import LocalRuntime
from containers.net_check import network_unavailable
from containers.sandbox import Sandbox
from containers.spec import SandboxSpec
from farm.embedded_redis import EmbeddedRedis
from tests.waiting import wait_until

CONNECT = "python3 -c \"import socket as s; s.create_connection(('{host}', {port}), 3); print('connected')\""
MODES = [
    pytest.param(False, id="no-network"),
    pytest.param(
        True,
        id="network",
        marks=pytest.mark.skipif(network_unavailable() is not None, reason=str(network_unavailable())),
    ),
]


@pytest.fixture(scope="module")
def host_api() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server.server_address[1]
    server.shutdown()


@pytest.mark.parametrize("network", MODES)
def test_host_redis_and_api_on_loopback_are_unreachable(
    runtime: LocalRuntime, redis_server: EmbeddedRedis, host_api: int, network: bool
) -> None:
    port = int(redis_server.url.rsplit(":", 1)[1].split("/")[0])
    with runtime.start(SandboxSpec(network=network)) as sandbox:
        for target in (port, host_api):
            result = sandbox.exec(CONNECT.format(host="127.0.0.1", port=target))
            assert "connected" not in result.stdout, target


@pytest.mark.parametrize("network", MODES)
def test_a_server_inside_another_sandbox_is_unreachable(runtime: LocalRuntime, network: bool) -> None:
    spec = SandboxSpec(network=network)
    with runtime.start(spec) as victim, runtime.start(spec) as attacker:
        victim.exec("nohup python3 -m http.server 8765 --bind 127.0.0.1 >/dev/null 2>&1 &")
        connect = CONNECT.format(host="127.0.0.1", port=8765)
        # it is up: reachable from its own sandbox (python's start is slow on a loaded machine)
        wait_until(
            lambda: "connected" in victim.exec(connect).stdout,
            15,
            interval_s=0.05,
            what="the victim's server",
        )
        assert "connected" not in attacker.exec(connect).stdout


def test_another_sandboxs_execution_server_is_out_of_sight(runtime: LocalRuntime) -> None:
    """The control directories (execution server sockets) of other sandboxes are not in the view."""
    with runtime.start(SandboxSpec()) as victim, runtime.start(SandboxSpec()) as attacker:
        socket_path = victim.info.socket_path
        result = attacker.exec(f"ls -la {socket_path} 2>&1; ls {runtime.root} 2>&1")
        assert victim.id not in result.stdout.replace(socket_path, "") or "No such file" in result.stdout
        connect = (
            f"import socket; s=socket.socket(socket.AF_UNIX); s.connect('{socket_path}'); print('connected')"
        )
        probe = attacker.exec(f'python3 -c "{connect}"')
        assert "connected" not in probe.stdout


def test_an_unrelated_sandbox_has_no_relay(sandbox: Sandbox) -> None:
    """Only sandboxes given a relay port have one; nothing listens for the others."""
    assert "connected" not in sandbox.exec(CONNECT.format(host="127.0.0.1", port=18080)).stdout
