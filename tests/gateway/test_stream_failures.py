"""A backend's streamed reply failing, judged by the one policy (farm/inference/policy.py): broken before
its first event it fails over; broken after it the call is cut, the backend marked, and the client gets the
error in its provider's stream shape; an overflow said in the stream ends the call unretried; a backend
that cannot be reached and one that breaks the exchange off both fail over, worded apart. The backends are
raw asyncio servers over real sockets; the gateway's forwarder calls them with each of its two clients."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest

from farm.embedded_redis import EmbeddedRedis, free_port
from farm.gateway.backends import StaticBackends
from farm.gateway.errors import ErrorKind, GatewayError
from farm.gateway.forwarding import Forwarder
from farm.gateway.normalized import ChatRequest
from farm.gateway.sessions import SessionInfo
from farm.gateway.streaming import StreamEvent
from farm.gateway.upstream_http import UpstreamClient
from tests.gateway.conftest import _stop, start_gateway

pytestmark = pytest.mark.integration

OVERFLOW = (
    "This model's maximum context length is 4096 tokens. However, you requested 5000 tokens "
    "(4000 in the messages, 1000 in the completion). Please reduce the length of the messages."
)

Behaviour = Callable[[asyncio.StreamWriter], Awaitable[None]]


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _sse(payload: dict[str, Any] | str) -> bytes:
    text = payload if isinstance(payload, str) else json.dumps(payload)
    return _chunk(f"data: {text}\n\n".encode())


def _delta(content: str, finish: str | None = None) -> dict[str, Any]:
    choice = {"index": 0, "delta": {"content": content}, "finish_reason": finish}
    return {"object": "chat.completion.chunk", "model": "m", "choices": [choice]}


_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


async def _healthy(writer: asyncio.StreamWriter) -> None:
    writer.write(_HEAD + _sse(_delta("")) + _sse(_delta("Hello", "stop")) + _sse("[DONE]") + _chunk(b""))


async def _cut_before_first_event(writer: asyncio.StreamWriter) -> None:
    """A chunk without text, then the connection drops mid-body (its chunked encoding unfinished)."""
    writer.write(_HEAD + _sse(_delta("")))
    await writer.drain()
    writer.transport.abort()


async def _cut_after_first_event(writer: asyncio.StreamWriter) -> None:
    writer.write(_HEAD + _sse(_delta("")) + _sse(_delta("Hel")))
    await writer.drain()
    writer.transport.abort()


async def _overflow_event(writer: asyncio.StreamWriter) -> None:
    """SGLang's and vLLM's error in place of a chunk, saying the prompt does not fit."""
    error = {"error": {"message": OVERFLOW, "type": "BadRequestError", "code": 400}}
    writer.write(_HEAD + _sse(error) + _sse("[DONE]") + _chunk(b""))


async def _hang_up(writer: asyncio.StreamWriter) -> None:
    """Takes the request and closes the connection without a reply."""
    writer.transport.abort()


async def _serve(behaviour: Behaviour) -> asyncio.Server:
    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head = await reader.readuntil(b"\r\n\r\n")
        lengths = [int(line.split(b":")[1]) for line in head.split(b"\r\n")
                   if line.lower().startswith(b"content-length")]  # fmt: skip
        await reader.readexactly(sum(lengths))
        await behaviour(writer)
        if not writer.transport.is_closing():
            await writer.drain()
            writer.close()

    return await asyncio.start_server(handle, "127.0.0.1", 0)


def _address(server: asyncio.Server) -> str:
    return f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}/v1"


@dataclass
class Outcome:
    events: list[StreamEvent] = field(default_factory=list)
    error: GatewayError | None = None
    backend: str = ""
    attempts: int = 0
    unhealthy: set[str] = field(default_factory=set)


def _stream(
    behaviours: list[Behaviour | None], fast: bool, max_attempts: int = 3
) -> tuple[Outcome, list[str]]:
    """One streamed call through a Forwarder over backends with these behaviours, in the order the
    session is pinned to them (None: a port nobody listens on). Returns its outcome and the addresses."""
    outcome = Outcome()
    addresses: list[str] = []

    async def call() -> None:
        servers = [await _serve(b) for b in behaviours if b is not None]
        served = iter(servers)
        addresses.extend(
            _address(next(served)) if b is not None else f"http://127.0.0.1:{free_port()}/v1"
            for b in behaviours
        )
        pool = StaticBackends(addresses)
        session = SessionInfo(session_id="s", created_at=0.0, metadata={"model": "m"})
        request = ChatRequest(messages=[{"role": "user", "content": "hi"}], sampling={}, stream=True)
        async with httpx.AsyncClient() as http:
            forwarder = Forwarder(pool, http, max_attempts, fast=UpstreamClient() if fast else None)
            try:
                upstream = await forwarder.open_stream(session, request)
                try:
                    async for events in upstream.events():
                        outcome.events += events
                finally:
                    await upstream.aclose()
                    outcome.backend, outcome.attempts = upstream.address, upstream.attempts
            except GatewayError as exc:
                outcome.error = exc
            finally:
                if forwarder.fast is not None:
                    await forwarder.fast.aclose()
                for server in servers:
                    server.close()
        outcome.unhealthy = set(pool.unhealthy_until)

    asyncio.run(call())
    return outcome, addresses


CLIENTS = pytest.mark.parametrize("fast", [True, False], ids=["aiohttp", "httpx"])


@CLIENTS
def test_a_stream_broken_before_its_first_event_fails_over(fast: bool) -> None:
    outcome, (cut, healthy) = _stream([_cut_before_first_event, _healthy], fast)
    assert outcome.error is None
    assert outcome.events == [("content", "Hello")]
    assert (outcome.backend, outcome.attempts, outcome.unhealthy) == (healthy, 2, {cut})


@CLIENTS
def test_a_stream_broken_after_its_first_event_is_cut_and_its_backend_marked(fast: bool) -> None:
    outcome, (cut, _) = _stream([_cut_after_first_event, _healthy], fast)
    assert outcome.events == [("content", "Hel")]
    assert outcome.error is not None and outcome.error.kind is ErrorKind.upstream
    assert outcome.error.message.startswith(f"backend {cut} broke off mid-exchange (")
    assert (outcome.backend, outcome.attempts, outcome.unhealthy) == (cut, 1, {cut})


@CLIENTS
def test_an_overflow_said_in_the_stream_is_not_failed_over(fast: bool) -> None:
    """No backend can fit the prompt: the call ends with the backend's words, nobody marked."""
    outcome, (saying, _) = _stream([_overflow_event, _healthy], fast)
    assert outcome.error is not None and outcome.error.kind is ErrorKind.context_overflow
    assert outcome.error.message == OVERFLOW
    assert (outcome.error.prompt_tokens, outcome.error.max_tokens) == (5000, 4096)
    assert (outcome.backend, outcome.attempts, outcome.unhealthy, outcome.events) == (saying, 1, set(), [])


@CLIENTS
@pytest.mark.parametrize(
    ("behaviours", "wording"),
    [([_hang_up, None], "is unreachable ("), ([None, _hang_up], "broke off mid-exchange (")],
    ids=["unreachable-last", "hang-up-last"],
)
def test_unreachable_and_broken_backends_both_fail_over_worded_apart(
    fast: bool, behaviours: list[Behaviour | None], wording: str
) -> None:
    outcome, (first, last) = _stream(behaviours, fast, max_attempts=2)
    assert outcome.error is not None and outcome.error.kind is ErrorKind.upstream
    assert outcome.error.message.startswith(f"all 2 attempts failed; last: {last}: {wording}")
    assert outcome.unhealthy == {first, last}


class _Backend:
    """A raw backend server on its own event loop thread, for a gateway process to call."""

    def __init__(self, behaviour: Behaviour) -> None:
        self.loop = asyncio.new_event_loop()
        self.server = self.loop.run_until_complete(_serve(behaviour))
        self.address = _address(self.server)
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def stop(self) -> None:
        self.loop.call_soon_threadsafe(self.server.close)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(5)


@pytest.fixture(scope="module")
def cutting_gateway(redis_server: EmbeddedRedis) -> Iterator[str]:
    """A gateway process whose backends break every stream off after its first event; a cut marks its
    backend unhealthy, so each call needs a backend of its own."""
    backends = [_Backend(_cut_after_first_event) for _ in range(2)]
    process, url = start_gateway(redis_server.url.rsplit("/", 1)[0] + "/6", [b.address for b in backends])
    yield url
    _stop(process)
    for backend in backends:
        backend.stop()


def _stream_frames(gateway: str, route: str, body: dict[str, Any]) -> tuple[str, list[dict[str, Any]]]:
    base = httpx.post(f"{gateway}/gateway/sessions", json={}).raise_for_status().json()["base_url"]
    with httpx.stream("POST", f"{base}/{route}", json=body, timeout=30) as response:
        assert response.status_code == 200  # the head went out with the stream; the error comes in it
        lines = list(response.iter_lines())
    failed = httpx.post(f"{base}/export", json={}).raise_for_status().json()["failed_calls"]
    data = [json.loads(line[5:]) for line in lines if line.startswith("data: {")]
    return "\n".join(lines), [*data, *failed]


def test_a_cut_stream_reaches_each_provider_client_as_its_error_event(cutting_gateway: str) -> None:
    chat = {"model": "m", "messages": [{"role": "user", "content": "hi"}], "stream": True}
    text, (*chunks, error, failed) = _stream_frames(cutting_gateway, "v1/chat/completions", chat)
    assert chunks[-1]["choices"][0]["delta"]["content"] == "Hel"
    assert error["error"]["type"] == "api_error"
    assert "broke off mid-exchange" in error["error"]["message"]
    assert (failed["class"], failed["status"]) == ("upstream", 502)

    anthropic = {**chat, "max_tokens": 16}
    text, (*_, error, failed) = _stream_frames(cutting_gateway, "v1/messages", anthropic)
    assert "event: error" in text and "Hel" in text
    assert error == {"type": "error", "error": {"type": "api_error", "message": failed["message"]}}
    assert "broke off mid-exchange" in failed["message"]
