"""A lean HTTP/1.1 client for the one hot call, POST {backend}/chat/completions, over pooled keep-alive
connections: asyncio protocols with httptools' C parser (installed with uvicorn[standard]) instead of httpx's
pure-Python h11 state machine, which cost more CPU per call than the rest of the gateway's work together.

Plain http:// only (inference backends sit on the cluster network); everything else stays on httpx.
"""

from __future__ import annotations

import asyncio
import json
from collections import deque
from collections.abc import AsyncIterator
from typing import Any
from urllib.parse import urlsplit

import httptools


class UpstreamConnectError(ConnectionError):
    """No connection could be made (refused, unreachable, connect timeout): safe to retry elsewhere."""


class UpstreamProtocolError(ConnectionError):
    """The connection broke or the reply was not HTTP/1.1 before the reply was complete."""


class UpstreamTimeout(TimeoutError):
    pass


class _Connection(asyncio.Protocol):
    """One keep-alive connection; carries one exchange at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.closed = False
        self._reset()

    def _reset(self) -> None:
        self.headers: dict[str, str] = {}
        self.status = 0
        self.keep_alive = False
        self.head: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.chunks: deque[bytes] = deque()
        self.complete = False
        self.error: BaseException | None = None
        self.wake: asyncio.Event = asyncio.Event()

    # asyncio.Protocol
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._fail(UpstreamProtocolError(f"unreadable HTTP reply: {exc}"))

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if not self.complete and exc is None and self._ends_at_eof():
            self.complete = True  # a body without length or chunking ends where the connection does
            self.wake.set()
        elif not self.complete:
            self._fail(UpstreamProtocolError(f"connection closed mid-reply ({exc or 'EOF'})"))

    def _ends_at_eof(self) -> bool:
        if not self.head.done() or self.head.cancelled() or self.head.exception() is not None:
            return False
        chunked = "chunked" in self.headers.get("transfer-encoding", "").lower()
        return "content-length" not in self.headers and not chunked

    # httptools callbacks
    def on_header(self, name: bytes, value: bytes) -> None:
        self.headers[name.decode("latin-1").lower()] = value.decode("latin-1")

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        self.keep_alive = self.parser.should_keep_alive()  # only meaningful here, not after the body
        if not self.head.done():
            self.head.set_result(None)

    def on_body(self, body: bytes) -> None:
        self.chunks.append(bytes(body))
        self.wake.set()

    def on_message_complete(self) -> None:
        self.complete = True
        self.wake.set()

    def _fail(self, error: BaseException) -> None:
        self.closed = True
        self.error = self.error or error
        if not self.head.done():
            self.head.set_exception(error)
        self.wake.set()
        if self.transport is not None:
            self.transport.close()

    def send(self, data: bytes) -> None:
        assert self.transport is not None
        self._reset()
        self.transport.write(data)

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()


class Response:
    """A reply whose head has arrived; read the body whole (`aread`) or line by line (`aiter_lines`)."""

    def __init__(self, client: Http1Client, key: tuple[str, int], conn: _Connection, read_timeout: float):
        self._client, self._key, self._conn, self._timeout = client, key, conn, read_timeout
        self.status_code = conn.status
        self.headers = conn.headers
        self.content = b""
        self._released = False

    async def _next_chunk(self) -> bytes | None:
        conn = self._conn
        while not conn.chunks:
            if conn.complete:
                return None
            if conn.error is not None:
                raise conn.error
            conn.wake.clear()
            try:
                async with asyncio.timeout(self._timeout):  # no task per wait, unlike wait_for
                    await conn.wake.wait()
            except TimeoutError:
                raise UpstreamTimeout(f"no reply data for {self._timeout:g} s") from None
        return conn.chunks.popleft()

    async def aread(self) -> bytes:
        parts = []
        while (chunk := await self._next_chunk()) is not None:
            parts.append(chunk)
        self.content = b"".join(parts)
        await self.aclose()
        return self.content

    async def aiter_lines(self) -> AsyncIterator[str]:
        pending = ""
        while (chunk := await self._next_chunk()) is not None:
            pending += chunk.decode("utf-8", errors="replace")
            *lines, pending = pending.split("\n")
            for line in lines:
                yield line.removesuffix("\r")
        if pending:
            yield pending.removesuffix("\r")

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        return json.loads(self.content)

    async def aclose(self) -> None:
        """Give a fully read connection back to the pool; one abandoned mid-reply is closed."""
        if self._released:
            return
        self._released = True
        reusable = self._conn.complete and not self._conn.closed and self._conn.keep_alive
        self._client._release(self._key, self._conn, reusable)


class Http1Client:
    def __init__(self, connect_timeout: float = 5.0, read_timeout: float = 600.0, max_idle: int = 256):
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self.max_idle = max_idle
        self._idle: dict[tuple[str, int], list[_Connection]] = {}

    async def _connect(self, key: tuple[str, int]) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            _, conn = await asyncio.wait_for(
                loop.create_connection(_Connection, key[0], key[1]), self.connect_timeout
            )
        except (OSError, TimeoutError) as exc:
            raise UpstreamConnectError(
                f"cannot connect to {key[0]}:{key[1]}: {exc or type(exc).__name__}"
            ) from exc
        return conn

    def _release(self, key: tuple[str, int], conn: _Connection, reusable: bool) -> None:
        idle = self._idle.setdefault(key, [])
        if reusable and len(idle) < self.max_idle:
            idle.append(conn)
        else:
            conn.close()

    async def post_json(self, url: str, body: dict[str, Any], timeout: float | None = None) -> Response:
        """POST `body` as JSON and wait for the reply's head. A reused connection the server had already
        closed is retried once on a fresh one (nothing was processed)."""
        parts = urlsplit(url)
        if parts.scheme != "http" or parts.hostname is None:
            raise ValueError(f"Http1Client speaks plain http:// only, not {url!r}")
        key = (parts.hostname, parts.port or 80)
        path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        payload = json.dumps(body, separators=(",", ":")).encode()
        head = (
            f"POST {path} HTTP/1.1\r\nHost: {parts.netloc}\r\nContent-Type: application/json\r\n"
            f"Accept: */*\r\nContent-Length: {len(payload)}\r\n\r\n"
        ).encode()
        idle = self._idle.get(key) or []
        while idle:
            conn = idle.pop()
            if conn.closed:
                continue
            try:
                return await self._exchange(key, conn, head + payload, timeout)
            except UpstreamProtocolError:
                continue  # the server closed it while idle; try another
        return await self._exchange(key, await self._connect(key), head + payload, timeout)

    async def _exchange(
        self, key: tuple[str, int], conn: _Connection, data: bytes, timeout: float | None
    ) -> Response:
        read_timeout = timeout or self.read_timeout
        conn.send(data)
        try:
            async with asyncio.timeout(read_timeout):
                await conn.head
        except TimeoutError:
            conn.close()
            raise UpstreamTimeout(f"no reply from {key[0]}:{key[1]} within {read_timeout:g} s") from None
        except BaseException:
            conn.close()
            raise
        return Response(self, key, conn, read_timeout)

    async def aclose(self) -> None:
        for idle in self._idle.values():
            for conn in idle:
                conn.close()
        self._idle.clear()
