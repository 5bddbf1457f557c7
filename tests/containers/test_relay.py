"""The relay: a sandbox reaches one host service through its relay port, only while the host grants it,
one checked request per connection (a keep-alive connection cannot smuggle a second request past the
check)."""

from __future__ import annotations

import http.server
import threading
from collections.abc import Iterator

import pytest

from containers.host_relay import grant, rewrite_head
from containers.local import LocalRuntime
from containers.sandbox import Sandbox
from containers.spec import SandboxSpec
from handlers.harness.gateway_access import allows

PORT = 18080
FETCH = """python3 - <<'PY'
import urllib.request, urllib.error
for path in {paths!r}:
    try:
        with urllib.request.urlopen("http://127.0.0.1:{port}" + path, timeout=5) as r:
            print(path, r.status, r.read().decode())
    except urllib.error.HTTPError as e:
        print(path, e.code)
    except Exception as e:
        print(path, "error", type(e).__name__)
PY"""
PIPELINED = """python3 - <<'PY'
import socket
s = socket.create_connection(("127.0.0.1", {port}), 5)
s.sendall(b"GET /ok/1 HTTP/1.1\\r\\nHost: x\\r\\n\\r\\nGET /secret HTTP/1.1\\r\\nHost: x\\r\\n\\r\\n")
data = b""
while chunk := s.recv(65536):
    data += chunk
print(data.count(b"HTTP/1."), b"/secret" in data)
PY"""


class _Echo(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        body = f"host saw {self.path}".encode()
        self.send_response(200)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture(scope="module")
def host_service() -> Iterator[tuple[str, int]]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Echo)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield ("127.0.0.1", server.server_address[1])
    server.shutdown()


@pytest.fixture(scope="module")
def relayed(runtime: LocalRuntime) -> Iterator[Sandbox]:
    with runtime.start(SandboxSpec(relay_port=PORT)) as sandbox:
        yield sandbox


def test_granted_paths_pass_and_others_are_refused(relayed: Sandbox, host_service: tuple[str, int]) -> None:
    with grant(relayed.info, host_service, lambda path: path.startswith("/ok/")):
        out = relayed.exec(FETCH.format(paths=["/ok/a", "/secret", "/ok/../secret"], port=PORT)).stdout
    lines = out.splitlines()
    assert lines[0] == "/ok/a 200 host saw /ok/a"
    assert lines[1] == "/secret 403"
    # a path a server might normalise (dot segments) is refused by the relay whatever the grant's rule
    assert lines[2] == "/ok/../secret 403"


def test_nothing_passes_without_a_grant(relayed: Sandbox, host_service: tuple[str, int]) -> None:
    out = relayed.exec(FETCH.format(paths=["/ok/a"], port=PORT)).stdout
    assert out.startswith("/ok/a error"), out


def test_a_second_request_on_the_connection_is_never_carried(
    relayed: Sandbox, host_service: tuple[str, int]
) -> None:
    with grant(relayed.info, host_service, lambda path: path.startswith("/ok/")):
        out = relayed.exec(PIPELINED.format(port=PORT)).stdout.split()
    assert out == ["1", "False"]


def test_hop_by_hop_headers_are_replaced_by_connection_close() -> None:
    head = b"POST /x HTTP/1.1\r\nHost: a\r\nConnection: keep-alive\r\nKeep-Alive: 5\r\nContent-Length: 2"
    path, rewritten = rewrite_head(head)
    assert path == "/x"
    assert rewritten == b"POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\nconnection: close\r\n\r\n"


@pytest.mark.parametrize(
    ("path", "allowed"),
    [
        ("/gateway/sessions/abc/v1/chat/completions", True),
        ("/gateway/sessions/abc/v1beta/models/m:generateContent?alt=sse", True),
        ("/gateway/sessions/abc/chat/completions", True),
        ("/gateway/sessions/abc/reward", False),
        ("/gateway/sessions/abc/end", False),
        ("/gateway/sessions/abc/export", False),
        ("/gateway/sessions/abc/completions", False),
        ("/gateway/sessions/abc", False),
        ("/gateway/sessions/abc/", False),
        ("/gateway/sessions/other/v1/chat/completions", False),
        ("/gateway/sessions/abcd/v1/chat/completions", False),
        ("/gateway/sessions/abc/../other/v1/chat/completions", False),
        ("/gateway/sessions/abc/%2e%2e/other/v1/messages", False),
        ("/process", False),
        ("/stop", False),
        ("http://127.0.0.1:8000/gateway/sessions/abc/v1/messages", False),
    ],
)
def test_a_harness_reaches_only_its_own_sessions_model_routes(path: str, allowed: bool) -> None:
    assert allows("/gateway/sessions/abc", path) is allowed
