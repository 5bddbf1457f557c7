"""The relay's parse and the server's agree: every target the relay accepts is routed by uvicorn (both of its
HTTP parsers, httptools as `farm api` runs it and h11) on exactly the path the relay judged; every shape the
relay refuses is driven through the same server too, to show what the server would have made of it.

The server here is real uvicorn over HTTP; the app behind it reports the `path` of the ASGI scope, which is
what Starlette's router (the API's) matches routes on."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
from collections.abc import Iterator
from typing import Any

import pytest
import uvicorn
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from containers.request_head import MalformedRequest, parse_head
from handlers.harness.gateway_access import allows

SP = "/gateway/sessions/s3ss10n"
SHAPES = [
    f"{SP}/reward#x",
    f"{SP}/end#/v1/messages",
    f"{SP}/end#?",
    f"{SP}/completions#",
    f"{SP}/reward;x",
    f"{SP}/v1/..%2Freward",
    f"{SP}%2Freward",
    f"{SP}/%2e%2e/other/end",
    f"{SP}/v1/../end",
    f"{SP}/./end",
    f"{SP}//end",
    f"/{SP}/v1/messages",
    f"{SP}/v1\\..\\end",
    f"http://127.0.0.1{SP}/end",
    f"http://h/gateway/sessions/other/v1/messages?{SP}/v1",
    f"{SP}/end?/v1/messages",
    f"{SP}/v1/m\u00e9ssages",
    f"{SP}/v1/" + "a" * 10000,
    "*",
    f"{SP}/v1/x%00",
    f"{SP}/v1/messages?a=%zz",
    f"{SP}/v1/messages?a b",
    f"{SP}/v1/chat/completions",
    f"{SP}/v1/messages?beta=true",
    f"{SP}/v1beta/models/m:generateContent?alt=sse",
    f"{SP}/v1/models",
    f"{SP}/chat/completions",
    f"{SP}/v1/responses/",
    f"{SP}/reward",
    f"{SP}/end?x",
]


async def _report(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    body = json.dumps({"path": scope["path"], "query": scope["query_string"].decode("latin-1")}).encode()
    await send(
        {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"%d" % len(body))]}
    )
    await send({"type": "http.response.body", "body": body})


@pytest.fixture(scope="module", params=["httptools", "h11"])
def server(request: pytest.FixtureRequest) -> Iterator[int]:
    config = uvicorn.Config(
        _report, host="127.0.0.1", port=0, http=request.param, log_level="critical", lifespan="off"
    )
    running = uvicorn.Server(config)
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_until_complete, args=(running.serve(),), daemon=True)
    thread.start()
    for _ in range(500):
        if running.started:
            break
        threading.Event().wait(0.02)
    assert running.started
    yield running.servers[0].sockets[0].getsockname()[1]
    running.should_exit = True
    thread.join(10)


def server_reading(port: int, target: str) -> dict[str, str] | int:
    """What uvicorn made of `target`: the scope's path and query, or the status it refused it with."""
    raw = f"GET {target} HTTP/1.1\r\nHost: x\r\nconnection: close\r\n\r\n".encode()
    with socket.create_connection(("127.0.0.1", port), 10) as conn:
        conn.sendall(raw)
        conn.settimeout(10)
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1]) if head.startswith(b"HTTP/1.") else 0
    return json.loads(body) if status == 200 else status


def relay_reading(target: str) -> tuple[str, str | None] | None:
    try:
        head = parse_head(f"GET {target} HTTP/1.1\r\nHost: x".encode())
    except MalformedRequest:
        return None
    return head.path, head.query


@pytest.mark.parametrize("target", SHAPES)
def test_what_the_relay_accepts_the_server_routes_on_the_same_path(server: int, target: str) -> None:
    relay = relay_reading(target)
    seen = server_reading(server, target)
    if relay is None:
        # refused at the relay: the server reads it differently from its text (httptools drops a fragment,
        # h11 keeps it; `%2F` is decoded to `/`...), refuses it, or it is a shape some parser normalises
        assert (
            not isinstance(seen, dict) or seen["path"] != target.partition("?")[0] or _plainly_risky(target)
        )
        return
    path, query = relay
    assert isinstance(seen, dict), seen
    assert seen["path"] == path and seen["query"] == (query or "")


def _plainly_risky(target: str) -> bool:
    """Shapes one of uvicorn's parsers reads literally but another parser (or proxy) does not: fragments (h11
    keeps them, httptools drops them), dot segments, `;` parameters, `//`, `\\`, %-escapes, `*`, non-ASCII."""
    return (
        any(mark in target for mark in ("#", "/.", ";", "//", "\\", "%", "*", "\u00e9")) or len(target) > 8192
    )


_TARGET_CHARS = st.sampled_from([*"/abz09.-_~%2eEfF#?;=&+:@\\ \t", "\u00e9", "%2F", "%2e", "..", "//"])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(tail=st.lists(_TARGET_CHARS, max_size=24).map("".join))
def test_any_target_the_relay_accepts_is_routed_as_judged(server: int, tail: str) -> None:
    target = f"{SP}/{tail}"
    relay = relay_reading(target)
    if relay is None:
        return
    seen = server_reading(server, target)
    assert isinstance(seen, dict), (target, seen)
    assert seen["path"] == relay[0], target
    assert allows(SP, relay[0]) == allows(SP, seen["path"])
