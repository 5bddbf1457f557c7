"""The gateway's upstream client (aiohttp) against a real backend process and real sockets."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable

import httpx
import pytest

from farm.embedded_redis import free_port
from farm.gateway.upstream_http import UpstreamClient, UpstreamConnectError, UpstreamTimeout
from tests.waiting import wait_until_async

MESSAGES = [{"role": "user", "content": "hello there"}]


async def _post_three_and_stream(base: str) -> None:
    client = UpstreamClient()
    try:
        model = httpx.get(f"{base}/models").json()["data"][0]["id"]
        for _ in range(3):
            response = await client.post_json(
                f"{base}/chat/completions", {"model": model, "messages": MESSAGES}
            )
            assert response.status_code == 200
            await response.aread()
            assert response.json()["choices"][0]["message"]["content"]
        body = {"model": model, "messages": MESSAGES, "stream": True}
        response = await client.post_json(f"{base}/chat/completions", body)
        lines = [line async for line in response.aiter_lines() if line]
        await response.aclose()
        assert lines[-1] == "data: [DONE]"
        chunks = [json.loads(line[5:]) for line in lines[:-1]]
        assert all(c["object"] == "chat.completion.chunk" for c in chunks)
    finally:
        await client.aclose()


def test_keep_alive_reuse_and_streamed_lines(fake_backend: str) -> None:
    asyncio.run(_post_three_and_stream(fake_backend))


async def _with_server(
    handle: Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]],
    run: Callable[[str], Awaitable[None]],
) -> None:
    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        await run(f"http://127.0.0.1:{port}/v1")
    finally:
        server.close()


def test_calls_share_one_keep_alive_connection() -> None:
    accepted = 0

    async def answer_all(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal accepted
        accepted += 1
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:
                return
            length = next(int(line.split(b":")[1]) for line in head.split(b"\r\n")
                          if line.lower().startswith(b"content-length"))  # fmt: skip
            await reader.readexactly(length)
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}")
            await writer.drain()

    async def run(base: str) -> None:
        client = UpstreamClient()
        for _ in range(5):
            response = await client.post_json(f"{base}/x", {"a": 1})
            assert await response.aread() == b"{}"
        await client.aclose()

    asyncio.run(_with_server(answer_all, run))
    assert accepted == 1, "the keep-alive connection is reused, not one per call"


def test_a_connection_the_server_closed_while_idle_is_not_used() -> None:
    after_close: list[bytes] = []
    """Per connection, what the client sent down it once the server had closed it (nothing, if unused)."""
    accepted = 0

    async def answer_once_then_close(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """Answers one request with a keep-alive reply, then closes the idle connection as servers do
        (its FIN, all the client sees of a close), and reads until the client closes its end in turn."""
        nonlocal accepted
        accepted += 1
        head = await reader.readuntil(b"\r\n\r\n")
        fields = dict(line.split(b":", 1) for line in head.split(b"\r\n")[1:] if b":" in line)
        length = int(next(v for k, v in fields.items() if k.lower() == b"content-length"))
        await reader.readexactly(length)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 11\r\n\r\n" + b'{"ok":true}')
        await writer.drain()
        writer.write_eof()
        after_close.append(await reader.read())
        writer.close()

    async def run(base: str) -> None:
        client = UpstreamClient()
        for call in range(1, 4):
            response = await client.post_json(f"{base}/x", {"a": 1})
            assert (response.status_code, await response.aread()) == (200, b'{"ok":true}')
            # The client has closed its end of the connection the server closed: it is out of the pool.
            await wait_until_async(lambda: len(after_close), 5, accept=call.__eq__, what="the client's close")
        await client.aclose()

    asyncio.run(_with_server(answer_once_then_close, run))
    assert after_close == [b""] * 3, "nothing was sent down a closed connection"
    assert accepted == 3, "each call after a close came on a new connection"


def test_refused_connection_and_silent_server() -> None:
    async def refused() -> None:
        with pytest.raises(UpstreamConnectError):
            await UpstreamClient().post_json(f"http://127.0.0.1:{free_port()}/v1/x", {})

    async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.read(1 << 16)
        await asyncio.sleep(5)  # the scenario: a server that never answers (the client's read limit ends it)

    async def run(base: str) -> None:
        with pytest.raises(UpstreamTimeout):
            await UpstreamClient(read_timeout=0.2).post_json(f"{base}/x", {})

    asyncio.run(refused())
    asyncio.run(_with_server(silent, run))
    with pytest.raises(ValueError, match="plain http"):
        asyncio.run(UpstreamClient().post_json("https://example.com/v1/x", {}))


def test_a_body_delimited_by_the_connection_closing() -> None:
    async def close_delimited(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n")
        await writer.drain()
        writer.write(b'{"done": true}')
        writer.close()

    async def run(base: str) -> None:
        client = UpstreamClient()
        response = await client.post_json(f"{base}/x", {})
        assert await response.aread() == b'{"done": true}'
        await client.aclose()

    asyncio.run(_with_server(close_delimited, run))
