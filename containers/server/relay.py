"""The sandbox end of the relay: a TCP port on the sandbox's own loopback whose connections are carried,
byte for byte, to a Unix socket in the control directory that the host serves (containers/host_relay.py).
The sandbox has no route to the host; this port is the one door, and the host decides what passes."""

from __future__ import annotations

import contextlib
import socket
import threading

CHUNK = 65536


def pipe(source: socket.socket, sink: socket.socket) -> None:
    """Copy until `source` ends, then end `sink`'s writing side (so half-closes pass through)."""
    try:
        while data := source.recv(CHUNK):
            sink.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            sink.shutdown(socket.SHUT_WR)


def _carry(client: socket.socket, unix_path: str) -> None:
    with client:
        try:
            upstream = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            upstream.connect(unix_path)
        except OSError:
            return  # nothing granted right now: the connection is refused by closing it
        with upstream:
            back = threading.Thread(target=pipe, args=(upstream, client), daemon=True)
            back.start()
            pipe(client, upstream)
            back.join()


def start_relay(port: int, unix_path: str) -> socket.socket:
    """Listen on 127.0.0.1:`port` and carry every connection to `unix_path`, each in its own thread."""
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(64)

    def accept() -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return
            client.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            threading.Thread(target=_carry, args=(client, unix_path), daemon=True).start()

    threading.Thread(target=accept, name="relay", daemon=True).start()
    return listener
