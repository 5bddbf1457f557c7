"""The host end of a sandbox's relay (containers/server/relay.py): while granted, connections the sandbox
makes to its relay port reach one host TCP service, one HTTP request per connection, and only requests
whose path the grant allows. Forcing `Connection: close` is what lets every request be checked: a
keep-alive connection would carry later requests unseen. Bodies and answers (server-sent events
included) are carried as they come."""

from __future__ import annotations

import contextlib
import os
import socket
import socketserver
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

from containers.handle import SandboxHandle
from containers.server.relay import pipe
from containers.server.wire import RELAY_SOCKET_NAME

MAX_HEAD = 64 * 1024
HOP_HEADERS = (b"connection", b"keep-alive", b"proxy-connection", b"upgrade")
FORBIDDEN = (
    b"HTTP/1.1 403 Forbidden\r\ncontent-type: text/plain\r\ncontent-length: %d\r\nconnection: close\r\n\r\n%s"
)


def relay_socket(handle: SandboxHandle) -> Path:
    return Path(handle.socket_path).with_name(RELAY_SOCKET_NAME)


def rewrite_head(head: bytes) -> tuple[str, bytes]:
    """The request's path and its head with hop-by-hop headers replaced by `Connection: close`."""
    lines = head.split(b"\r\n")
    method, target, version = lines[0].split(b" ", 2)
    kept = [line for line in lines[1:] if line and line.split(b":", 1)[0].strip().lower() not in HOP_HEADERS]
    rewritten = b"\r\n".join([lines[0], *kept, b"connection: close", b"", b""])
    del method, version
    return target.decode("latin-1"), rewritten


class _Handler(socketserver.BaseRequestHandler):
    server: _RelayServer

    def handle(self) -> None:
        client: socket.socket = self.request
        head, rest = self._read_head(client)
        if head is None:
            return
        try:
            path, rewritten = rewrite_head(head)
        except ValueError:
            return self._refuse(client, b"malformed request")
        if not self.server.allow(path):
            return self._refuse(client, b"this sandbox is not granted that path")
        try:
            upstream = socket.create_connection(self.server.target, timeout=10)
        except OSError:
            return self._refuse(client, b"the service is unavailable")
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
            chunk = client.recv(65536)
            if not chunk or len(data) > MAX_HEAD:
                return None, b""
            data += chunk
        head, _, rest = data.partition(b"\r\n\r\n")
        return head, rest

    @staticmethod
    def _refuse(client: socket.socket, reason: bytes) -> None:
        with contextlib.suppress(OSError):
            client.sendall(FORBIDDEN % (len(reason), reason))


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
