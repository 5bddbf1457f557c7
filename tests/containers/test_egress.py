"""A networked sandbox reaches the public internet only: private, shared, link-local (cloud metadata) and
multicast ranges are refused inside its own network namespace, and it cannot lift the filter."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from containers.egress import BLOCKED_V4, ruleset
from containers.local import LocalRuntime
from containers.net_check import network_unavailable
from containers.sandbox import Sandbox
from containers.spec import SandboxSpec

CONNECT = "python3 -c \"import socket as s; s.create_connection(('{host}', {port}), 5); print('connected')\""
needs_tools = pytest.mark.skipif(
    network_unavailable() is not None,
    reason=str(network_unavailable()),
)


@pytest.fixture(scope="module")
def networked(runtime: LocalRuntime) -> Iterator[Sandbox]:
    with runtime.start(SandboxSpec(network=True)) as sandbox:
        yield sandbox


@needs_tools
@pytest.mark.parametrize("host", ["169.254.169.254", "10.1.2.3", "172.16.0.1", "192.168.1.1", "100.64.0.1"])
def test_private_and_metadata_addresses_are_refused_at_once(networked: Sandbox, host: str) -> None:
    started = time.monotonic()
    result = networked.exec(CONNECT.format(host=host, port=80))
    assert "connected" not in result.stdout
    assert "ConnectionRefused" in result.stderr  # rejected by the filter, not left to time out
    assert time.monotonic() - started < 3


@needs_tools
def test_the_sandbox_cannot_lift_the_filter(networked: Sandbox) -> None:
    result = networked.exec("nft flush ruleset; nft list ruleset")
    assert "Operation not permitted" in result.stderr
    assert "ConnectionRefused" in networked.exec(CONNECT.format(host="10.1.2.3", port=80)).stderr


def test_ruleset_lets_name_servers_and_allowed_networks_through_before_the_drop() -> None:
    rules = ruleset(["10.255.255.53"], ["10.9.0.0/16", "fd12::/16"])
    assert "ip daddr 10.255.255.53 meta l4proto { tcp, udp } th dport 53 accept" in rules
    assert rules.index("10.9.0.0/16") < rules.index(BLOCKED_V4[1])
    assert "ip6 daddr { fd12::/16 } accept" in rules
    assert 'oif "lo" accept' in rules
