"""Connection settings shared by both clients: base URL, bearer token, timeouts."""

from __future__ import annotations

import os
from typing import Any

import httpx

from farm.client.calls import Call
from farm.client.errors import FarmUnavailable


def default_base_url() -> str:
    from farm.settings import get_settings

    settings = get_settings()
    return f"http://{settings.api_host}:{settings.api_port}"


def client_options(base_url: str | None, token: str | None, timeout_s: float) -> dict[str, Any]:
    headers = {"accept": "application/json"}
    token = token if token is not None else os.environ.get("FARM_API_TOKEN")
    if token:
        headers["authorization"] = f"Bearer {token}"
    return {
        "base_url": (base_url or default_base_url()).rstrip("/"),
        "headers": headers,
        "timeout": httpx.Timeout(timeout_s, connect=min(timeout_s, 10.0)),
        # one blocking POST /process per in-flight job: the pool must not cap the consumer's budget
        "limits": httpx.Limits(max_connections=None, max_keepalive_connections=64),
    }


def transport_error(call: Call[Any], base_url: str, exc: httpx.TransportError) -> FarmUnavailable:
    return FarmUnavailable(f"{call.method} {base_url}{call.path} failed: {type(exc).__name__}: {exc}")
