"""What a networked sandbox may reach: the public internet only. pasta already keeps it off the host's
loopback and addresses; this nftables filter, set inside the sandbox's network namespace before anything
runs there, also drops traffic to private, shared, link-local (cloud metadata), documentation, benchmark
and multicast ranges, and to the IPv6 prefixes that carry IPv4 addresses (NAT64, IPv4-compatible,
IPv4-mapped), where a farm's Redis, API and other nodes live, except the host's name servers on port 53.
Operators can let specific networks through with FARM_SANDBOX_EGRESS_ALLOW (comma-separated CIDRs, e.g.
an internal package mirror). The sandbox cannot change the rules: it has no capability in that
namespace."""

from __future__ import annotations

import ipaddress
import logging
import os
import shutil
import subprocess

log = logging.getLogger(__name__)

BLOCKED_V4 = [
    "0.0.0.0/8", "10.0.0.0/8", "100.64.0.0/10", "127.0.0.0/8", "169.254.0.0/16", "172.16.0.0/12",
    "192.0.0.0/24", "192.0.2.0/24", "192.168.0.0/16", "198.18.0.0/15", "198.51.100.0/24",
    "203.0.113.0/24", "224.0.0.0/4", "240.0.0.0/4",
]  # fmt: skip
"""Unspecified, private, shared (CGNAT), loopback, link-local, IETF, documentation (TEST-NET-1/2/3, often
reused inside labs and clouds), benchmark, multicast and reserved."""
BLOCKED_V6 = [
    "::/96", "::ffff:0:0/96", "64:ff9b::/96", "64:ff9b:1::/48", "2001:db8::/32", "fc00::/7", "fe80::/10",
    "ff00::/8",
]  # fmt: skip
"""IPv4-compatible (with loopback and unspecified) and IPv4-mapped addresses, NAT64 prefixes (a NAT64
gateway would carry them to any IPv4 address, private ones included), documentation, unique-local,
link-local and multicast."""
_warned = False


class EgressFilterError(RuntimeError):
    pass


def name_servers(resolv_conf: str = "/etc/resolv.conf") -> list[str]:
    servers = []
    try:
        with open(resolv_conf) as handle:
            for line in handle:
                fields = line.split()
                if len(fields) >= 2 and fields[0] == "nameserver":
                    servers.append(str(ipaddress.ip_address(fields[1].split("%")[0])))
    except (OSError, ValueError):
        pass
    return servers


def egress_allow() -> list[str]:
    raw = os.environ.get("FARM_SANDBOX_EGRESS_ALLOW", "")
    return [str(ipaddress.ip_network(p.strip(), strict=False)) for p in raw.split(",") if p.strip()]


def ruleset(servers: list[str], allow: list[str]) -> str:
    lines = [
        "table inet farm_sandbox {",
        "  chain egress {",
        "    type filter hook output priority 0; policy accept;",
        '    oif "lo" accept',
    ]
    for server in servers:
        family = "ip6" if ":" in server else "ip"
        lines.append(f"    {family} daddr {server} meta l4proto {{ tcp, udp }} th dport 53 accept")
    for family, networks in (
        ("ip", [a for a in allow if ":" not in a]),
        ("ip6", [a for a in allow if ":" in a]),
    ):
        if networks:
            lines.append(f"    {family} daddr {{ {', '.join(networks)} }} accept")
    lines += [
        f"    ip daddr {{ {', '.join(BLOCKED_V4)} }} reject",
        f"    ip6 daddr {{ {', '.join(BLOCKED_V6)} }} reject",
        "  }",
        "}",
    ]
    return "\n".join(lines) + "\n"


def restrict(pid: int, *, user_namespace: bool) -> bool:
    """Set the filter in the network namespace of `pid`; False (logged once) where nft is missing."""
    global _warned
    nft, nsenter = shutil.which("nft"), shutil.which("nsenter")
    if nft is None or nsenter is None:
        if not _warned:
            _warned = True
            log.warning(
                "nft or nsenter not found: networked sandboxes can reach private networks (other nodes, "
                "a remote Redis); install Debian's nftables"
            )
        return False
    enter = [nsenter, "-t", str(pid), "--net"]
    if user_namespace:
        enter += ["--user", "--preserve-credentials"]
    rules = ruleset(name_servers(), egress_allow())
    done = subprocess.run(
        [*enter, nft, "-f", "-"],
        input=rules,
        capture_output=True,
        text=True,
        env={"PATH": "/usr/sbin:/usr/bin:/sbin:/bin"},
    )
    if done.returncode != 0:
        raise EgressFilterError(f"could not filter the sandbox's egress: {done.stderr.strip()[-500:]}")
    return True
