"""The host end of a sandbox's relay (containers/server/relay.py): while granted, connections the sandbox
makes to its relay port reach one host TCP service, one HTTP request per connection, and only requests
whose path the grant allows. The path is judged as the server will route it: the head must be in a form
every parser reads one way (containers/request_head.py) and is carried rebuilt from that parse, so the
bytes the service reads are the request that was judged. Forcing `Connection: close` is what lets every
request be checked: a keep-alive connection would carry later requests unseen. Bodies and answers
(server-sent events included) are carried as they come."""

from __future__ import annotations

import contextlib
import os
import socket
import socketserver
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from containers.handle import SandboxHandle
from containers.request_head import MalformedRequest, parse_head
from containers.server.relay import pipe
from containers.server.wire import RELAY_SOCKET_NAME

MAX_HEAD = 64 * 1024
UNAVAILABLE = (
    b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: text/plain\r\ncontent-length: %d\r\n"
    b"retry-after: 1\r\nconnection: close\r\n\r\n%s"
)
FORBIDDEN = (
    b"HTTP/1.1 403 Forbidden\r\ncontent-type: text/plain\r\ncontent-length: %d\r\nconnection: close\r\n\r\n%s"
)
TOO_LARGE = (
    b"HTTP/1.1 431 Request Header Fields Too Large\r\ncontent-type: text/plain\r\ncontent-length: %d\r\n"
    b"connection: close\r\n\r\n%s"
)


def relay_socket(handle: SandboxHandle) -> Path:
    return Path(handle.socket_path).with_name(RELAY_SOCKET_NAME)


def rewrite_head(head: bytes) -> tuple[str, bytes]:
    """The path the server will route the request on, and the head to carry: rebuilt from the parse, with
    hop-by-hop headers replaced by `Connection: close`. MalformedRequest for a head it cannot judge."""
    parsed = parse_head(head)
    return parsed.path, parsed.render()


class _Handler(socketserver.BaseRequestHandler):
    server: _RelayServer

    def handle(self) -> None:
        client: socket.socket = self.request
        head, rest = self._read_head(client)
        if head is None:  # the client went away, or its head is too large (then `rest` says so)
            return self._answer(client, TOO_LARGE, rest) if rest else None
        try:
            path, rewritten = rewrite_head(head)
        except MalformedRequest as exc:
            return self._refuse(client, b"malformed request: " + str(exc).encode())
        if not self.server.allow(path):
            return self._refuse(client, b"this sandbox is not granted that path")
        try:
            upstream = socket.create_connection(self.server.target, timeout=10)
        except OSError:  # a restart of the service: clients retry a 503, not a 403
            return self._answer(client, UNAVAILABLE, b"the service is unavailable")
        with upstream:
            upstream.settimeout(None)
            upstream.sendall(rewritten + rest)
            back = threading.Thread(target=pipe, args=(upstream, client), daemon=True)
            back.start()
            pipe(client, upstream)
            back.join()

    @staticmethod
    def _read_head(client: socket.socket) -> tuple[bytes | None, bytes]:
        data = b""
        while b"\r\n\r\n" not in data:
            if len(data) > MAX_HEAD:
                return None, b"request head too large"
            chunk = client.recv(65536)
            if not chunk:
                return None, b""
            data += chunk
        head, _, rest = data.partition(b"\r\n\r\n")
        return (head, rest) if len(head) <= MAX_HEAD else (None, b"request head too large")

    @staticmethod
    def _refuse(client: socket.socket, reason: bytes) -> None:
        _Handler._answer(client, FORBIDDEN, reason)

    @staticmethod
    def _answer(client: socket.socket, template: bytes, reason: bytes) -> None:
        with contextlib.suppress(OSError):
            client.sendall(template % (len(reason), reason))


class _RelayServer(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def __init__(self, path: str, target: tuple[str, int], allow: Callable[[str], bool]) -> None:
        self.target = target
        self.allow = allow
        super().__init__(path, _Handler)


@contextlib.contextmanager
def grant(handle: SandboxHandle, target: tuple[str, int], allow: Callable[[str], bool]) -> Iterator[None]:
    """Serve the sandbox's relay for the duration of the block: requests whose path `allow` accepts are
    carried to `target` (host, port); the rest are answered 403."""
    path = relay_socket(handle)
    with contextlib.suppress(FileNotFoundError):
        path.unlink()  # whatever the sandbox may have left there
    server = _RelayServer(str(path), target, allow)
    if handle.uid is not None:
        os.chown(path, handle.uid, handle.gid if handle.gid is not None else -1)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True)
    thread.start()
    try:
        yield
    finally:
        server.shutdown()
        server.server_close()
        with contextlib.suppress(OSError):
            path.unlink()
