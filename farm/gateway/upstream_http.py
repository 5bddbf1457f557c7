"""The client of the gateway's one hot call, POST {backend}/chat/completions: aiohttp over pooled keep-alive
connections. Its C HTTP parser costs a fraction of the CPU httpx's pure-Python h11 spends per call, which
was more than the rest of the gateway's work together (bench/gateway.py). Plain http:// only (inference
backends sit on the cluster network); https backends, /models and /tokenize stay on httpx.

Failures come out as three classes the shared policy (farm/inference/policy.py) judges:
UpstreamConnectError (nothing was sent: the backend is unreachable), UpstreamProtocolError (the exchange
broke) and UpstreamTimeout.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
from multidict import CIMultiDictProxy

from farm.inference.policy import ConnectFailed


class UpstreamConnectError(ConnectFailed):
    """No connection could be made (refused, unreachable, connect timeout): safe to retry elsewhere."""


class UpstreamProtocolError(ConnectionError):
    """The connection broke or the reply was not HTTP before the reply was complete."""


class UpstreamTimeout(TimeoutError):
    pass


_BROKEN = (aiohttp.ServerDisconnectedError, aiohttp.ClientOSError, aiohttp.ClientPayloadError,
           aiohttp.ClientResponseError)  # fmt: skip


class Response:
    """A reply whose head has arrived; read the body whole (`aread`) or line by line (`aiter_lines`)."""

    def __init__(self, raw: aiohttp.ClientResponse) -> None:
        self._raw = raw
        self.status_code = raw.status
        self.headers: CIMultiDictProxy[str] = raw.headers
        self.content = b""

    async def aread(self) -> bytes:
        try:
            self.content = await self._raw.read()
        except aiohttp.SocketTimeoutError as exc:
            raise UpstreamTimeout(f"reply body stalled: {exc}") from None
        except _BROKEN as exc:
            raise UpstreamProtocolError(f"reply body broke off: {exc!r}") from exc
        finally:
            self._raw.release()
        return self.content

    async def aiter_lines(self) -> AsyncIterator[str]:
        try:
            async for line in self._raw.content:
                yield line.decode("utf-8", errors="replace").removesuffix("\n").removesuffix("\r")
        except aiohttp.SocketTimeoutError as exc:
            raise UpstreamTimeout(f"stream stalled: {exc}") from None
        except _BROKEN as exc:
            raise UpstreamProtocolError(f"stream broke off: {exc!r}") from exc

    @property
    def text(self) -> str:
        return self.content.decode("utf-8", errors="replace")

    def json(self) -> Any:
        return json.loads(self.content)

    async def aclose(self) -> None:
        """A fully read reply gives its connection back to the pool; one abandoned mid-reply closes it."""
        if self._raw.content.at_eof():
            self._raw.release()
        else:
            self._raw.close()


class UpstreamClient:
    def __init__(self, connect_timeout: float = 5.0, read_timeout: float = 600.0, max_idle: int = 256):
        self.connect_timeout = connect_timeout
        self.read_timeout = read_timeout
        self.max_idle = max_idle
        self._session: aiohttp.ClientSession | None = None

    def _open(self) -> aiohttp.ClientSession:
        """Made on first use: an aiohttp session belongs to the running event loop."""
        if self._session is None or self._session.closed:
            # An idle connection is dropped before uvicorn's own 5 s keep-alive ends (vLLM and SGLang serve
            # with uvicorn), so the pool never sends a call down a connection the server is closing.
            connector = aiohttp.TCPConnector(limit=0, limit_per_host=self.max_idle, keepalive_timeout=4.0)
            self._session = aiohttp.ClientSession(
                connector=connector, skip_auto_headers=("User-Agent", "Accept-Encoding")
            )
        return self._session

    async def post_json(self, url: str, body: dict[str, Any], timeout: float | None = None) -> Response:
        """POST `body` as JSON and wait for the reply's head; `timeout` bounds each wait for data."""
        if not url.startswith("http://"):
            raise ValueError(f"the upstream client speaks plain http:// only, not {url!r}")
        payload = json.dumps(body, separators=(",", ":")).encode()
        limits = aiohttp.ClientTimeout(
            total=None, sock_connect=self.connect_timeout, sock_read=timeout or self.read_timeout
        )
        try:
            raw = await self._open().post(
                url, data=payload, headers={"Content-Type": "application/json"}, timeout=limits
            )
        except (aiohttp.ClientConnectorError, aiohttp.ConnectionTimeoutError) as exc:
            raise UpstreamConnectError(f"cannot connect to {url}: {exc}") from exc
        except aiohttp.SocketTimeoutError:
            raise UpstreamTimeout(f"no reply from {url} within {timeout or self.read_timeout:g} s") from None
        except _BROKEN as exc:
            raise UpstreamProtocolError(f"{url}: {exc!r}") from exc
        return Response(raw)

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
