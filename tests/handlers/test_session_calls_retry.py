"""The worker's session calls (handlers/harness/sessions.py) ride out a gateway restart: no answer or a
5xx is retried with the farm's one backoff policy (farm/retry.py) for RETRY_WINDOW_S, a 4xx is the
caller's error at once. A real HTTP server on loopback plays the gateway."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from handlers.harness import sessions
from handlers.harness.sessions import GatewaySessions, GatewayUnavailable


class Gateway(ThreadingHTTPServer):
    def __init__(self, statuses: list[int]) -> None:
        super().__init__(("127.0.0.1", 0), _Answer)
        self.statuses = statuses
        self.seen = 0


class _Answer(BaseHTTPRequestHandler):
    server: Gateway

    def do_POST(self) -> None:
        self.rfile.read(int(self.headers.get("content-length", 0)))
        status = self.server.statuses[min(self.server.seen, len(self.server.statuses) - 1)]
        self.server.seen += 1
        body = json.dumps({"session_id": "s1", "base_url": "http://x"} if status == 200 else {"e": 1})
        self.send_response(status)
        self.send_header("content-length", str(len(body)))
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args: object) -> None:
        pass


def serve(statuses: list[int]) -> Iterator[Gateway]:
    server = Gateway(statuses)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def restarting() -> Iterator[Gateway]:
    yield from serve([503, 502, 200])


@pytest.fixture
def refusing() -> Iterator[Gateway]:
    yield from serve([403])


def test_a_gateway_answering_5xx_is_retried_until_it_answers(restarting: Gateway) -> None:
    with GatewaySessions(f"http://127.0.0.1:{restarting.server_port}", token="") as calls:
        assert calls.create("t", {}) == ("s1", "http://x")
    assert restarting.seen == 3


def test_a_refusal_is_not_retried(refusing: Gateway) -> None:
    with (
        GatewaySessions(f"http://127.0.0.1:{refusing.server_port}", token="") as calls,
        pytest.raises(GatewayUnavailable, match="HTTP 403"),
    ):
        calls.create("t", {})
    assert refusing.seen == 1


def test_no_gateway_gives_up_after_the_window(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sessions, "RETRY_WINDOW_S", 0.5)
    started = time.monotonic()
    with (
        GatewaySessions("http://127.0.0.1:9", token="", timeout_s=1.0) as calls,
        pytest.raises(GatewayUnavailable, match="did not answer POST /sessions: ConnectError"),
    ):
        calls.create("t", {})
    assert 0.4 < time.monotonic() - started < 3.0
