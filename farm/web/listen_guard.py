"""Protected mode, as Redis has it: the API does not listen beyond loopback without a token.

Without FARM_API_TOKEN every management route (backends, cancel, submit, a session's reward) answers
whoever reaches the port. That is fine on 127.0.0.1 (`farm up`, a laptop) and never on an interface other
machines reach, so `farm api` and `farm gateway` refuse to start there with one line naming the setting.
"""

from __future__ import annotations

import ipaddress
import socket

import click

LOOPBACK_NAMES = frozenset({"localhost", "localhost.localdomain", "ip6-localhost"})


class InsecureListen(click.ClickException):
    """Listening on `host` without a token would open the farm to the network. A click error: the command
    that meets it prints its one line and exits with status 1."""


def is_loopback(host: str) -> bool:
    """Whether `host` (an address or a name) reaches only this machine. A name counts when every address
    it resolves to is a loopback address; the wildcard addresses (0.0.0.0, ::, empty) never do."""
    name = host.strip().strip("[]")
    if name.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(name).is_loopback
    except ValueError:
        pass
    if not name:
        return False
    try:
        infos = socket.getaddrinfo(name, None)
    except OSError:
        return False
    addresses = {str(info[4][0]).split("%")[0] for info in infos}
    return bool(addresses) and all(ipaddress.ip_address(a).is_loopback for a in addresses)


def check_listen(host: str, token: str | None) -> None:
    """Raise InsecureListen when `host` is beyond loopback and no token is set."""
    if token or is_loopback(host):
        return
    raise InsecureListen(
        f"refusing to listen on {host or '0.0.0.0'} without a token: set FARM_API_TOKEN (clients then send "
        "`Authorization: Bearer <token>`), or listen on 127.0.0.1"
    )
