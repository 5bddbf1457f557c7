"""A networked sandbox's attempts to reach the ranges that lead back into a lab or a cloud are refused at
once (issue 30, item 7): NAT64 and IPv4-compatible IPv6 (which carry any IPv4 address, private ones
included), the documentation and benchmark ranges (reused inside labs), unique-local and link-local.

Each attempt is made only once the kernel holds the range in the sandbox's filter (read from the host),
so no packet to these addresses ever leaves the machine even if the filter were missing one."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator

import pytest

from containers.egress import BLOCKED_V4, BLOCKED_V6
from containers.local import LocalRuntime
from containers.net_check import network_unavailable
from containers.sandbox import Sandbox
from containers.spec import SandboxSpec

pytestmark = pytest.mark.skipif(
    network_unavailable() is not None,
    reason=str(network_unavailable()),
)

# range -> an address in it the attempt goes to
TARGETS = {
    "64:ff9b::/96": "64:ff9b::a00:1",  # NAT64 of 10.0.0.1
    "64:ff9b:1::/48": "64:ff9b:1::a00:1",
    "::/96": "::a00:1",  # IPv4-compatible 10.0.0.1
    "2001:db8::/32": "2001:db8::1",
    "fc00::/7": "fd00::1",
    "fe80::/10": "fe80::1",
    "192.0.2.0/24": "192.0.2.1",
    "198.51.100.0/24": "198.51.100.7",
    "203.0.113.0/24": "203.0.113.9",
    "198.18.0.0/15": "198.19.0.1",
    "169.254.0.0/16": "169.254.169.254",
}

ATTEMPT = """
import json, socket, sys, time
host = sys.argv[1]
family = socket.AF_INET6 if ":" in host else socket.AF_INET
address = (host, 80)
if host.startswith("fe80"):
    index = next(i for i, name in socket.if_nameindex() if name != "lo")
    address = (host, 80, 0, index)
s = socket.socket(family, socket.SOCK_STREAM)
s.settimeout(3)
started = time.monotonic()
try:
    s.connect(address)
    outcome = "connected"
except OSError as exc:
    outcome = type(exc).__name__ + ":" + str(exc.errno)
print(json.dumps({"outcome": outcome, "seconds": time.monotonic() - started}))
"""


@pytest.fixture(scope="module")
def networked(runtime: LocalRuntime) -> Iterator[Sandbox]:
    with runtime.start(SandboxSpec(network=True)) as sandbox:
        yield sandbox


def kernel_ruleset(sandbox: Sandbox) -> str:
    """The filter as the kernel holds it in the sandbox's network namespace, read from the host."""
    assert sandbox.info.init_pid is not None
    done = subprocess.run(
        [
            "nsenter",
            "-t",
            str(sandbox.info.init_pid),
            "--net",
            "nft",
            "list",
            "table",
            "inet",
            "farm_sandbox",
        ],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def test_every_range_is_in_the_block_lists() -> None:
    for network in TARGETS:
        assert network in BLOCKED_V4 + BLOCKED_V6, network


@pytest.mark.parametrize("network", list(TARGETS))
def test_an_attempt_to_each_range_is_refused(networked: Sandbox, network: str) -> None:
    rules = kernel_ruleset(networked)
    # nft prints ::/96 as ::/96 and the others as given
    assert network in rules, f"{network} is not in the sandbox's filter: not attempting\n{rules}"
    started = time.monotonic()
    result = networked.exec(["python3", "-c", ATTEMPT, TARGETS[network]], timeout=30)
    report = json.loads(result.stdout)
    assert report["outcome"] != "connected"
    if network == "fe80::/10":
        # the filter drops it, but its ICMPv6 answer to a link-local source finds no route back: the
        # attempt ends at its own timeout (the rule is in the kernel's ruleset above)
        assert report["outcome"].startswith(("ConnectionRefusedError", "TimeoutError")), report
        return
    # refused by the filter (ICMP port unreachable), not left to time out
    assert report["outcome"].startswith("ConnectionRefusedError"), report
    assert report["seconds"] < 2.5 and time.monotonic() - started < 20, report
