"""Backends are probed, and an unhealthy one says why.

A backend is probed when it is registered (POST /add_llm_server answers with the probe's verdict) and,
while it is unhealthy, every few seconds after: it is re-admitted once it answers. (Workers mark a
backend unhealthy, with the error, when a call to it fails to connect or returns 5xx.) A probe is
bounded (PROBE_TIMEOUT_S in all) and asks two things:
- GET /health at the server's root (vLLM's api_server, SGLang's http_server): 200 once the engine can
  generate; /v1/models alone would answer while the engine is still loading;
- GET <address>/models: the OpenAI-compatible routes the farm calls are there (a wrong address, e.g. a
  missing `/v1`, or another service on that port, fails here).
A 4xx on /health is taken as a server without that route (not as broken); a refused or timed-out
connection or a 5xx is unhealthy.
"""

from __future__ import annotations

import asyncio
import logging

import httpx

from farm.background import raise_if_stopping
from farm.models.backends import BackendInfo
from farm.outage import redis_outage, report
from farm.pool import AsyncBackendPool

log = logging.getLogger(__name__)
PROBE_EVERY_S = 2.0
PROBE_TIMEOUT_S = 3.0
"""The whole probe of one backend (both requests); a registration waits for it at most this long."""


def probe_url(backend: BackendInfo | str) -> str:
    address = backend.address if isinstance(backend, BackendInfo) else backend
    return f"{address.rstrip('/').removesuffix('/v1')}/health"


def models_url(address: str) -> str:
    base = address.rstrip("/")
    return f"{base}/models" if base.endswith("/v1") else f"{base}/v1/models"


def _described(exc: Exception) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


async def probe(http: httpx.AsyncClient, address: str, timeout_s: float = PROBE_TIMEOUT_S) -> str | None:
    """None when the backend at `address` answers as one should; else why not, in one line."""
    try:
        async with asyncio.timeout(timeout_s):
            health = await http.get(probe_url(address))
            if health.status_code >= 500:
                return f"GET {probe_url(address)} answered {health.status_code}"
            models = await http.get(models_url(address))
            if models.status_code >= 400:
                return f"GET {models_url(address)} answered {models.status_code}"
    except TimeoutError:
        return f"no answer within {timeout_s:g} s"
    except httpx.HTTPError as exc:
        return f"unreachable ({_described(exc)})"
    return None


def probe_client() -> httpx.AsyncClient:
    """Never follows redirects (an allowed address must not lead elsewhere: farm/api/url_allow.py)."""
    return httpx.AsyncClient(timeout=httpx.Timeout(PROBE_TIMEOUT_S, connect=1.5), follow_redirects=False)


async def probe_and_record(pool: AsyncBackendPool, address: str) -> list[BackendInfo]:
    """A newly (re-)registered backend's probe, recorded; the pool as listed after it."""
    async with probe_client() as http:
        reason = await probe(http, address)
    if reason is None:
        await pool.mark_healthy(address)
    else:
        log.warning("backend %s registered but unhealthy: %s", address, reason)
        await pool.mark_unhealthy(address, reason)
    return await pool.list()


async def probe_forever(pool: AsyncBackendPool) -> None:
    async with probe_client() as http:
        while True:
            await asyncio.sleep(PROBE_EVERY_S)
            raise_if_stopping()
            try:
                # One SCARD while every backend is healthy (the common case), not a listing.
                unhealthy = await pool.any_unhealthy()
                redis_outage.back()  # this round is the API's regular Redis call when it is idle
                if not unhealthy:
                    continue
                for backend in await pool.list():
                    if backend.healthy:
                        continue
                    reason = await probe(http, backend.address)
                    if reason is None:
                        log.info("backend %s answers again", backend.address)
                        await pool.mark_healthy(backend.address)
                    elif reason != backend.error:
                        await pool.mark_unhealthy(backend.address, reason)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                report("backend prober", exc, log, "backend probe round failed")
