"""Brings failed backends back: probes the unhealthy ones every few seconds and re-admits those
that answer. (Workers mark a backend unhealthy when a call to it fails to connect or returns 5xx.)"""

from __future__ import annotations

import asyncio
import logging

import httpx

from farm.models.backends import BackendInfo
from farm.outage import redis_outage, report
from farm.pool import AsyncBackendPool

log = logging.getLogger(__name__)
PROBE_EVERY_S = 2.0


def probe_url(backend: BackendInfo) -> str:
    """Both servers answer GET /health at their root (vLLM's api_server and SGLang's http_server) with
    200 once the engine can generate; /v1/models would answer while the engine is still loading."""
    return f"{backend.address.rstrip('/').removesuffix('/v1')}/health"


async def probe_forever(pool: AsyncBackendPool) -> None:
    async with httpx.AsyncClient(timeout=2.0) as http:
        while True:
            await asyncio.sleep(PROBE_EVERY_S)
            try:
                # One SCARD while every backend is healthy (the common case), not a listing.
                unhealthy = await pool.any_unhealthy()
                redis_outage.back()  # this round is the API's regular Redis call when it is idle
                if not unhealthy:
                    continue
                for backend in await pool.list():
                    if backend.healthy:
                        continue
                    try:
                        response = await http.get(probe_url(backend))
                    except httpx.HTTPError:
                        continue
                    if response.status_code < 500:
                        log.info("backend %s answers again", backend.address)
                        await pool.mark_healthy(backend.address)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                report("backend prober", exc, log, "backend probe round failed")
