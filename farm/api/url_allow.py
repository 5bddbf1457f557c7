"""Which URLs the farm will send requests to on a caller's say-so: inference backends
(`add_llm_server`) and result callbacks (`callback_url`).

A URL is http(s) with a host; the host is either named in the operator's allow-list as a host name,
or every address it resolves to is inside an allowed network and outside the refused ones (cloud
metadata and link-local addresses by default). Clients never follow redirects (httpx's default,
kept everywhere the farm calls out), so an allowed host cannot bounce a request elsewhere.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
from dataclasses import dataclass
from urllib.parse import urlsplit

from fastapi.exceptions import RequestValidationError

IPNetwork = ipaddress.IPv4Network | ipaddress.IPv6Network

LOOPBACK_AND_PRIVATE = "127.0.0.0/8,::1/128,10.0.0.0/8,172.16.0.0/12,192.168.0.0/16,fc00::/7"
ANYWHERE = "0.0.0.0/0,::/0"
# Link-local (169.254.169.254 is the AWS/GCP/Azure metadata service; fd00:ec2::254 AWS's IPv6 one;
# 100.100.100.200 Alibaba's), "this network", multicast and IPv4-mapped IPv6 (a way around the IPv4 rules).
METADATA_AND_LINK_LOCAL = (
    "169.254.0.0/16,fe80::/10,fd00:ec2::254/128,100.100.100.200/32,0.0.0.0/8,::/128,"
    "224.0.0.0/4,ff00::/8,::ffff:0:0/96"
)


class URLRefused(ValueError):
    pass


@dataclass(frozen=True)
class URLAllowList:
    allow: tuple[IPNetwork, ...]
    hosts: tuple[str, ...]
    """Host names allowed as such, lower case; a leading dot allows every subdomain."""
    refuse: tuple[IPNetwork, ...]

    @classmethod
    def parse(cls, allow: str, refuse: str = METADATA_AND_LINK_LOCAL) -> URLAllowList:
        networks: list[IPNetwork] = []
        hosts: list[str] = []
        for entry in (e.strip() for e in allow.split(",")):
            if not entry:
                continue
            try:
                networks.append(ipaddress.ip_network(entry, strict=False))
            except ValueError:
                hosts.append(entry.lower().removeprefix("*"))
        refused = tuple(ipaddress.ip_network(e.strip(), strict=False) for e in refuse.split(",") if e.strip())
        return cls(tuple(networks), tuple(hosts), refused)

    def host_listed(self, host: str) -> bool:
        host = host.lower().rstrip(".")
        return any(host == h or (h.startswith(".") and host.endswith(h)) for h in self.hosts)

    def address_allowed(self, address: str) -> bool:
        ip = ipaddress.ip_address(address.split("%", 1)[0])
        if any(ip in net for net in self.refuse if net.version == ip.version):
            return False
        return any(ip in net for net in self.allow if net.version == ip.version)

    async def check(self, url: str) -> None:
        """Raises URLRefused saying why `url` may not be called."""
        host = url_host(url)
        if self.host_listed(host):
            return
        for address in await resolve(host):
            if not self.address_allowed(address):
                raise URLRefused(f"{host} ({address}) is not in the allowed networks")


def url_host(url: str) -> str:
    if any(c.isspace() or ord(c) < 32 for c in url):
        raise URLRefused("the URL contains whitespace or control characters")
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  (raises on a malformed port)
    except ValueError as exc:
        raise URLRefused(f"not a URL: {exc}") from None
    if parts.scheme not in ("http", "https"):
        raise URLRefused("only http and https URLs are accepted")
    if not parts.hostname:
        raise URLRefused("the URL has no host")
    return parts.hostname


async def resolve(host: str) -> list[str]:
    try:
        return [str(ipaddress.ip_address(host.split("%", 1)[0]))]
    except ValueError:
        pass
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(host, None, type=socket.SOCK_STREAM)
    except OSError as exc:
        raise URLRefused(f"{host} does not resolve ({exc})") from None
    return sorted({str(info[4][0]) for info in infos})


async def check_url(policy: URLAllowList, url: str, loc: tuple[str | int, ...]) -> None:
    """A 422 naming the field when the policy refuses the URL."""
    try:
        await policy.check(url)
    except URLRefused as exc:
        raise RequestValidationError(
            [{"type": "url_refused", "loc": loc, "msg": f"URL refused: {exc}", "input": url}]
        ) from None
