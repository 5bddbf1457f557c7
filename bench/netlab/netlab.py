"""A private network of namespaces for multi-node tests: a hub namespace holding a bridge, one namespace
per host on it (each with its own address), and a veth from the root namespace onto the same bridge so
the test process reaches them. Faults are made with the hosts' own tools: a link cut is the hub side of
a host's veth set down (both directions drop silently, as a pulled cable does), packet delay and loss is
tc netem on the host's interface.

Only what this module creates is ever addressed: every name starts with PREFIX and the run's tag, the
addresses are in one /24 of 10.231.0.0/16 that no interface of the machine holds when the lab starts.
`sweep_leftovers()` removes what a killed run left (names starting with PREFIX), `close()` removes this
run's, and both are safe to call twice.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import secrets
import shutil
import subprocess
from dataclasses import dataclass, field

PREFIX = "rfn"
"""Start of every namespace, bridge and veth name the lab makes (rollout-farm nodes)."""
SUPERNET = ipaddress.ip_network("10.231.0.0/16")


class NetLabUnavailable(RuntimeError):
    """This machine cannot make network namespaces (not root, no `ip`): the caller skips."""


def _ip(*args: str, ns: str | None = None, check: bool = True) -> subprocess.CompletedProcess[str]:
    argv = ["ip", *(["-n", ns] if ns else []), *args]
    return subprocess.run(argv, check=check, capture_output=True, text=True, timeout=30)


def _tc(ns: str, verb: str, dev: str, qdisc: list[str]) -> bool:
    argv = ["tc", "-n", ns, "qdisc", verb, "dev", dev, "root", *qdisc]
    return subprocess.run(argv, check=False, capture_output=True, timeout=30).returncode == 0


def unavailable_reason() -> str | None:
    if os.geteuid() != 0:
        return "network namespaces need root"
    for tool in ("ip", "tc", "unshare"):
        if shutil.which(tool) is None:
            return f"`{tool}` is not installed (apt-get install iproute2 util-linux)"
    return None


def sweep_leftovers() -> list[str]:
    """Remove every namespace and root-namespace link named PREFIX-* (a killed run's); returns them."""
    removed: list[str] = []
    namespaces = _ip("netns", "list", check=False).stdout.split("\n")
    for line in namespaces:
        name = line.split(" ")[0].strip()
        if name.startswith(f"{PREFIX}-"):
            _kill_namespace_processes(name)
            _ip("netns", "del", name, check=False)
            removed.append(name)
    for line in _ip("-o", "link", "show", check=False).stdout.splitlines():
        name = line.split(":")[1].strip().split("@")[0] if ":" in line else ""
        if name.startswith(PREFIX):
            _ip("link", "del", name, check=False)
            removed.append(name)
    return removed


def _kill_namespace_processes(ns: str) -> None:
    pids = _ip("netns", "pids", ns, check=False).stdout.split()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, ValueError, PermissionError):
            os.kill(int(pid), 9)


def _free_subnet() -> ipaddress.IPv4Network:
    """A /24 of SUPERNET that no address on the machine's root namespace falls in."""
    held = [
        ipaddress.ip_interface(word)
        for line in _ip("-o", "-4", "addr", "show").stdout.splitlines()
        for word in line.split()[3:4]
    ]
    candidates = list(SUPERNET.subnets(new_prefix=24))[1:-1]
    start = secrets.randbelow(len(candidates))
    for net in candidates[start:] + candidates[:start]:
        if not any(iface.ip in net for iface in held):
            return net  # type: ignore[return-value]
    raise NetLabUnavailable("every /24 of 10.231.0.0/16 is in use on this machine")


@dataclass
class Host:
    name: str
    namespace: str
    address: str
    port_link: str
    """The hub side of this host's veth (on the bridge): set down to cut the host off."""
    interface: str = "eth0"


@dataclass
class NetLab:
    """`add_host(name)` makes a namespace on the lab's bridge; `exec_argv(host, argv)` runs argv in it."""

    tag: str = field(default_factory=lambda: secrets.token_hex(2))
    subnet: ipaddress.IPv4Network | None = None
    hosts: dict[str, Host] = field(default_factory=dict)
    hub: str = ""
    root_link: str = ""
    root_address: str = ""
    _next: int = 2

    def start(self) -> NetLab:
        reason = unavailable_reason()
        if reason:
            raise NetLabUnavailable(reason)
        try:
            self._start()
        except BaseException:
            self.close()
            raise
        return self

    def _start(self) -> None:
        self.subnet = self.subnet or _free_subnet()
        self.hub = f"{PREFIX}-{self.tag}-hub"
        _ip("netns", "add", self.hub)
        _ip("link", "set", "lo", "up", ns=self.hub)
        _ip("link", "add", "br0", "type", "bridge", ns=self.hub)
        _ip("link", "set", "br0", "up", ns=self.hub)
        # the test process's own way in: a veth from the root namespace onto the bridge
        self.root_link = f"{PREFIX}{self.tag}r"
        peer = f"{PREFIX}{self.tag}rp"
        _ip("link", "add", self.root_link, "type", "veth", "peer", "name", peer)
        _ip("link", "set", peer, "netns", self.hub)
        _ip("link", "set", peer, "master", "br0", ns=self.hub)
        _ip("link", "set", peer, "up", ns=self.hub)
        self.root_address = str(self.subnet.network_address + 1)
        _ip("addr", "add", f"{self.root_address}/{self.subnet.prefixlen}", "dev", self.root_link)
        _ip("link", "set", self.root_link, "up")

    def add_host(self, name: str) -> Host:
        assert self.subnet is not None, "start() the lab first"
        index = self._next
        self._next += 1
        namespace = f"{PREFIX}-{self.tag}-{name}"
        address = str(self.subnet.network_address + index)
        inner, outer = f"{PREFIX}{self.tag}h{index}", f"{PREFIX}{self.tag}p{index}"
        _ip("netns", "add", namespace)
        host = Host(name, namespace, address, port_link=outer)
        self.hosts[name] = host
        _ip("link", "set", "lo", "up", ns=namespace)
        _ip("link", "add", inner, "type", "veth", "peer", "name", outer)
        _ip("link", "set", outer, "netns", self.hub)
        _ip("link", "set", outer, "master", "br0", ns=self.hub)
        _ip("link", "set", outer, "up", ns=self.hub)
        _ip("link", "set", inner, "netns", namespace)
        _ip("link", "set", inner, "name", host.interface, ns=namespace)
        _ip("addr", "add", f"{address}/{self.subnet.prefixlen}", "dev", host.interface, ns=namespace)
        _ip("link", "set", host.interface, "up", ns=namespace)
        return host

    def exec_argv(
        self, host: Host, argv: list[str], hostname: str | None = None, own_pids: bool = False
    ) -> list[str]:
        """`argv` run inside the host's network namespace; with `hostname` in its own UTS namespace under
        that name (sandboxes and the orphan sweep know their node by hostname); with `own_pids` in its
        own pid namespace too, so killing its first process kills every process of the host."""
        wrapped = ["ip", "netns", "exec", host.namespace]
        if hostname or own_pids:
            wrapped += ["unshare", "--uts"]
            if own_pids:
                wrapped += ["--pid", "--fork", "--mount-proc", "--kill-child=SIGKILL"]
            wrapped += ["--", "sh", "-c", 'hostname "$0" && exec "$@"', hostname or host.name]
        return wrapped + argv

    def cut(self, name: str) -> None:
        """The host loses its link: every packet to or from it is dropped from now on."""
        _ip("link", "set", self.hosts[name].port_link, "down", ns=self.hub)

    def heal(self, name: str) -> None:
        _ip("link", "set", self.hosts[name].port_link, "up", ns=self.hub)

    def degrade(self, name: str, delay_ms: int, jitter_ms: int, loss_pct: float, rate_kbit: int) -> str:
        """Delay and drop the host's packets in both directions: tc netem on each side of its veth where
        the kernel has it; else (sch_netem missing, as on some VM kernels) a tbf rate limit, whose queue
        delays packets under load, and nftables dropping `loss_pct` of them at random. Returns which."""
        host = self.hosts[name]
        sides = ((host.namespace, host.interface), (self.hub, host.port_link))
        netem = ["netem", "delay", f"{delay_ms}ms", f"{jitter_ms}ms", "loss", f"{loss_pct}%"]
        if all(_tc(ns, "replace", dev, netem) for ns, dev in sides):
            return f"netem delay {delay_ms}±{jitter_ms} ms, loss {loss_pct}%"
        tbf = ["tbf", "rate", f"{rate_kbit}kbit", "burst", "16kb", "latency", f"{max(delay_ms, 1) * 4}ms"]
        for ns, dev in sides:
            if not _tc(ns, "replace", dev, tbf):
                raise NetLabUnavailable(f"tc cannot shape {dev} in {ns}")
        per_mille = int(loss_pct * 10)
        rules = f"""table inet {PREFIX}lab {{
  chain out {{
    type filter hook output priority 0; policy accept;
    numgen random mod 1000 < {per_mille} drop
  }}
  chain in {{
    type filter hook input priority 0; policy accept;
    numgen random mod 1000 < {per_mille} drop
  }}
}}
"""
        if shutil.which("nft") is None:
            raise NetLabUnavailable("neither sch_netem nor nft (apt-get install nftables) to drop packets")
        subprocess.run(
            ["ip", "netns", "exec", host.namespace, "nft", "-f", "-"],
            input=rules,
            text=True,
            check=True,
            capture_output=True,
            timeout=30,
        )
        return f"tbf {rate_kbit} kbit/s (queue up to {max(delay_ms, 1) * 4} ms), nft random loss {loss_pct}%"

    def restore(self, name: str) -> None:
        host = self.hosts[name]
        for ns, dev in ((host.namespace, host.interface), (self.hub, host.port_link)):
            _tc(ns, "del", dev, [])
        if shutil.which("nft"):
            subprocess.run(
                ["ip", "netns", "exec", host.namespace, "nft", "delete", "table", "inet", f"{PREFIX}lab"],
                check=False,
                capture_output=True,
                timeout=30,
            )

    def close(self) -> None:
        """Kill whatever still runs in the lab's namespaces and remove them and the root veth."""
        for host in list(self.hosts.values()):
            _kill_namespace_processes(host.namespace)
            _ip("netns", "del", host.namespace, check=False)
        self.hosts.clear()
        if self.hub:
            _ip("netns", "del", self.hub, check=False)
        if self.root_link:
            _ip("link", "del", self.root_link, check=False)  # gone with its peer's namespace, usually

    def __enter__(self) -> NetLab:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
