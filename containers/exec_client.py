"""Blocking client of the execution server: one persistent connection, one request at a time."""

from __future__ import annotations

import contextlib
import itertools
import os
import select
import socket
import stat
import threading
import time
from pathlib import Path
from typing import Any

from containers.errors import ExecServerError, SandboxStartError
from containers.server import wire

# Added to an op's own timeout before the client gives up on the server's answer.
_TRANSPORT_SLACK_S = 10.0


def connect(address: str, timeout: float) -> socket.socket:
    kind, target = wire.parse_address(address)
    sock = socket.socket(socket.AF_UNIX if kind == "unix" else socket.AF_INET, socket.SOCK_STREAM)
    if kind == "tcp":
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    sock.settimeout(timeout)
    try:
        if kind == "unix":
            _connect_unix_nofollow(sock, target)
        else:
            sock.connect(target)
    except OSError as exc:
        sock.close()
        raise ExecServerError(f"cannot connect to the execution server at {address}: {exc}") from exc
    return sock


def _connect_unix_nofollow(sock: socket.socket, path: str | tuple[str, int]) -> None:
    """Connect to the socket file itself, never to what a link planted in its place points at: the
    control directory is writable from inside the sandbox, which could otherwise send this client (and
    the commands meant for it) to another sandbox's server or a host service."""
    fd = os.open(str(path), os.O_PATH | os.O_NOFOLLOW)
    try:
        if not stat.S_ISSOCK(os.fstat(fd).st_mode):
            raise ConnectionRefusedError(f"{path} is not a socket")
        sock.connect(f"/proc/self/fd/{fd}")
    finally:
        os.close(fd)


def wait_for_socket(path: str | Path, timeout: float) -> None:
    """Wait until something accepts connections on the Unix socket `path`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if os.path.exists(path):
            with socket.socket(socket.AF_UNIX) as probe, contextlib.suppress(OSError):
                probe.connect(str(path))
                return
        time.sleep(0.01)
    raise SandboxStartError(f"execution server socket {path} did not appear within {timeout:g}s")


class ExecClient:
    """Talks to one execution server. Thread-safe: calls are serialised on the shared connection, and
    `call_once` uses a connection of its own (for `cancel` while a call is in flight)."""

    def __init__(self, address: str, connect_timeout: float = 5.0) -> None:
        self.address = address
        self.connect_timeout = connect_timeout
        self._sock: socket.socket | None = None
        self._reader: Any = None
        self._ids = itertools.count(1)
        self._lock = threading.Lock()

    def call(self, op: str, args: dict[str, Any] | None = None, timeout: float | None = None) -> Any:
        with self._lock:
            if self._sock is None:
                self._sock = connect(self.address, self.connect_timeout)
                self._reader = self._sock.makefile("rb")
            try:
                return self._roundtrip(self._sock, self._reader, op, args or {}, timeout)
            except OSError as exc:  # transport trouble: drop the connection, the next call reconnects
                self._close_locked()
                raise ExecServerError(f"execution server connection lost during {op}: {exc!r}") from exc

    def call_once(self, op: str, args: dict[str, Any] | None = None, timeout: float = 5.0) -> Any:
        sock = connect(self.address, min(timeout, self.connect_timeout))
        try:
            with sock.makefile("rb") as reader:
                return self._roundtrip(sock, reader, op, args or {}, timeout)
        except OSError as exc:
            raise ExecServerError(f"{op} failed: {exc!r}") from exc
        finally:
            sock.close()

    def lost(self) -> bool:
        """Whether the shared connection is gone: never opened, or closed by the server (it died). A poll
        and, when readable, a peek: it neither waits nor wakes the server (the warm pool's claim)."""
        with self._lock:
            if self._sock is None:
                return True
            poller = select.poll()
            poller.register(self._sock, select.POLLIN)
            if not poller.poll(0):
                return False
            try:
                return self._sock.recv(1, socket.MSG_PEEK) == b""
            except OSError:
                return True

    def _roundtrip(
        self, sock: socket.socket, reader: Any, op: str, args: dict[str, Any], timeout: float | None
    ) -> Any:
        request_id = next(self._ids)
        sock.settimeout(None if timeout is None else timeout + _TRANSPORT_SLACK_S)
        sock.sendall(wire.encode({"id": request_id, "op": op, "args": args}))
        return self._answer(reader, op, request_id)

    @staticmethod
    def _answer(reader: Any, op: str, request_id: int) -> Any:
        line = reader.readline()
        if not line:
            raise ConnectionError(f"execution server closed the connection during {op}")
        reply = wire.decode(line)
        if reply.get("id") != request_id:
            raise ConnectionError(f"out-of-order reply to {op}")
        if not reply.get("ok"):
            raise ExecServerError(f"{op} failed in the sandbox: {reply.get('error')}")
        return reply.get("result")

    def _close_locked(self) -> None:
        if self._reader is not None:
            with contextlib.suppress(OSError):
                self._reader.close()
        if self._sock is not None:
            with contextlib.suppress(OSError):
                self._sock.close()
        self._sock = self._reader = None

    def close(self) -> None:
        with self._lock:
            self._close_locked()
