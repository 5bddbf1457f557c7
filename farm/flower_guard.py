"""Flower as the README starts it (`celery -A farm flower`): on loopback unless told otherwise, never on
another address without auth unless told so on purpose, and gone on the first SIGTERM or SIGINT.

Flower itself listens on every interface without auth by default, and on a signal it raises SystemExit
in its main thread and lets the interpreter exit, which first joins every thread of its executor: a thread
still waiting on a Redis that is gone (an inspect or an enable-events broadcast, which kombu retries)
holds the exit for as long as that takes, and a second signal only raises again inside the join. So the
signal starts a bounded grace instead (Flower's own shutdown, its state save included, runs in it) and
the process then exits whatever its threads are doing.

All of it runs when the app is imported by a `celery ... flower` command line, before Flower parses its
options (it reads FLOWER_* then); a Flower config file (`--conf`) is not read by the check.
"""

from __future__ import annotations

import ipaddress
import logging
import os
import signal
import sys
import threading
from collections.abc import Mapping
from types import FrameType

ALLOW_OPEN_ENV = "FARM_FLOWER_ALLOW_UNAUTHENTICATED"
"""`true`: Flower may listen on a non-loopback address without auth (behind a proxy that authenticates)."""

EXIT_GRACE_S = 3.0
"""How long Flower's own shutdown may take after a signal before the process exits regardless."""

log = logging.getLogger("farm.flower")
_stopping = threading.Event()


def is_flower_command(argv: list[str]) -> bool:
    return "flower" in argv[1:]


def flower_option(argv: list[str], env: Mapping[str, str], name: str) -> str | None:
    """An option as Flower would see it: `--name=value` (tornado's only form, `-` and `_` alike) over
    FLOWER_NAME from the environment."""
    found = env.get(f"FLOWER_{name.upper()}")
    wanted = name.replace("_", "-")
    for arg in argv:
        key, equals, value = arg.lstrip("-").partition("=")
        if arg.startswith("--") and equals and key.replace("_", "-") == wanted:
            found = value
    return found


def is_loopback(address: str) -> bool:
    if address.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(address.strip("[]")).is_loopback
    except ValueError:
        return False  # another name, or "" (every interface)


def open_listening_refusal(argv: list[str], env: Mapping[str, str]) -> str | None:
    """The one-line reason Flower must not start, or None: a non-loopback address without basic auth
    or OAuth (`--auth`), unless ALLOW_OPEN_ENV says so."""
    if flower_option(argv, env, "unix_socket"):
        return None
    address = flower_option(argv, env, "address") or ""
    if is_loopback(address) or flower_option(argv, env, "basic_auth") or flower_option(argv, env, "auth"):
        return None
    if env.get(ALLOW_OPEN_ENV, "").strip().lower() in ("1", "true", "yes"):
        return None
    shown = address or "every interface"
    return (
        f"flower: refusing to listen on {shown} without auth: give --basic-auth=USER:PASSWORD "
        f"(or FLOWER_BASIC_AUTH), or keep it on loopback, or set {ALLOW_OPEN_ENV}=true to serve it open "
        "on purpose"
    )


def exit_after_grace(signum: int, grace_s: float = EXIT_GRACE_S) -> None:
    """Flower's shutdown proceeds; if the process is still here after `grace_s`, it exits (0 on
    SIGTERM, 130 on SIGINT) without waiting for threads stuck on the broker."""
    code = 130 if signum == signal.SIGINT else 0

    def force() -> None:
        sys.stderr.write(f"flower: still stopping after {grace_s:.0f} s (broker unreachable?); exiting\n")
        sys.stderr.flush()
        os._exit(code)

    timer = threading.Timer(grace_s, force)
    timer.daemon = True
    timer.start()


def on_stop_signal(signum: int, frame: FrameType | None) -> None:
    name = signal.Signals(signum).name
    if _stopping.is_set():
        os._exit(130 if signum == signal.SIGINT else 0)  # a second signal: at once
    _stopping.set()
    log.info("%s received, stopping Flower", name)
    exit_after_grace(signum)
    raise SystemExit(0)  # what Flower's own handler does: its io loop stops, its atexit stop runs


class _OneLineOutage(logging.Filter):
    """Keeps kombu's "Broker connection error, trying again" warning (Flower's event consumer while Redis is
    away) to its one line: the reconnect is expected, its traceback says nothing more."""

    def filter(self, record: logging.LogRecord) -> bool:
        record.exc_info = None
        record.exc_text = None
        return True


def guard_flower(argv: list[str], env: Mapping[str, str]) -> None:
    """For a `celery ... flower` command line: loopback by default, the open-listening refusal, and the
    signal handling above (Flower installs its SIGTERM handler from its module after this runs, so the
    farm's replaces that name there)."""
    if not is_flower_command(argv):
        return
    os.environ.setdefault("FLOWER_ADDRESS", "127.0.0.1")
    refusal = open_listening_refusal(argv, {**env, "FLOWER_ADDRESS": os.environ["FLOWER_ADDRESS"]})
    if refusal is not None:
        sys.stderr.write(refusal + "\n")
        raise SystemExit(2)
    import flower.command  # type: ignore[import-untyped]  # Flower ships no type hints

    flower.command.sigterm_handler = on_stop_signal
    signal.signal(signal.SIGINT, on_stop_signal)
    logging.getLogger("kombu.mixins").addFilter(_OneLineOutage())


__all__ = [
    "ALLOW_OPEN_ENV",
    "EXIT_GRACE_S",
    "flower_option",
    "guard_flower",
    "is_loopback",
    "open_listening_refusal",
]
