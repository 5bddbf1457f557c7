"""Token-in/token-out clients for one inference backend: `BackendClient` (sync, for Celery workers) and
`AsyncBackendClient` (for the gateway). Both map transport failures onto farm.inference.errors.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any

import httpx

from farm.inference import wire
from farm.inference.errors import BackendUnavailable, BadBackendResponse
from farm.inference.generation import Generation
from farm.inference.wire import BackendKind

DEFAULT_TIMEOUT = httpx.Timeout(600.0, connect=5.0)


class _Base:
    def __init__(self, address: str, kind: BackendKind = "vllm", model: str | None = None) -> None:
        if kind not in ("vllm", "sglang"):
            raise ValueError(f"unknown backend kind {kind!r}")
        self.address = address.rstrip("/")
        self.kind: BackendKind = kind
        self.model = model

    def _request(self, prompt_ids: list[int], sampling: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
        return wire.request(self.kind, self.address, prompt_ids, sampling, self.model)

    def _answer(self, response: httpx.Response, prompt_len: int, started: float) -> Generation:
        if response.status_code != 200:
            raise wire.error_for_status(response.status_code, response.text, self.address)
        try:
            payload = response.json()
        except ValueError as exc:
            raise BadBackendResponse(f"{self.address} answered non-JSON", backend=self.address) from exc
        return wire.parse(self.kind, payload, self.address, prompt_len, time.perf_counter() - started)

    def _unavailable(self, exc: httpx.HTTPError) -> BackendUnavailable:
        return BackendUnavailable(f"{self.address}: {type(exc).__name__}: {exc}", backend=self.address)


class BackendClient(_Base):
    def __init__(self, address: str, kind: BackendKind = "vllm", http: httpx.Client | None = None,
                 model: str | None = None) -> None:  # fmt: skip
        super().__init__(address, kind, model)
        self._owns_http = http is None
        self.http = http if http is not None else httpx.Client(timeout=DEFAULT_TIMEOUT)

    def generate(self, prompt_ids: list[int], sampling: Mapping[str, Any]) -> Generation:
        url, body = self._request(prompt_ids, sampling)
        started = time.perf_counter()
        try:
            response = self.http.post(url, json=body)
        except httpx.HTTPError as exc:
            raise self._unavailable(exc) from exc
        return self._answer(response, len(prompt_ids), started)

    def close(self) -> None:
        if self._owns_http:
            self.http.close()

    def __enter__(self) -> BackendClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class AsyncBackendClient(_Base):
    def __init__(self, address: str, kind: BackendKind = "vllm", http: httpx.AsyncClient | None = None,
                 model: str | None = None) -> None:  # fmt: skip
        super().__init__(address, kind, model)
        self._owns_http = http is None
        self.http = http if http is not None else httpx.AsyncClient(timeout=DEFAULT_TIMEOUT)

    async def generate(self, prompt_ids: list[int], sampling: Mapping[str, Any]) -> Generation:
        url, body = self._request(prompt_ids, sampling)
        started = time.perf_counter()
        try:
            response = await self.http.post(url, json=body)
        except httpx.HTTPError as exc:
            raise self._unavailable(exc) from exc
        return self._answer(response, len(prompt_ids), started)

    async def aclose(self) -> None:
        if self._owns_http:
            await self.http.aclose()

    async def __aenter__(self) -> AsyncBackendClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()
