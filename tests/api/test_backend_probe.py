"""A dead backend is said at once: registering one probes it (the API lists it unhealthy, with why), and a
job's model call with no healthy backend fails within FARM_NO_BACKEND_WAIT_S naming every address and its
error (before: 200 `"healthy": true` at registration, then NoBackendAvailable after the job's whole 600 s,
naming nothing). Real API over HTTP, real Redis, real sockets."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
import redis

from farm.agent.model_client import PolicyClient
from farm.embedded_redis import free_port
from farm.errors import NoBackendAvailable
from farm.launcher import LocalFarm
from farm.pool import BackendPool
from farm.settings import get_settings


class _Broken(BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(500)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def broken_backend() -> Iterator[str]:
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Broken)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    server.shutdown()
    server.server_close()


@pytest.fixture
def pool_api(api: httpx.Client) -> Iterator[httpx.Client]:
    api.post("/clear_llm_server").raise_for_status()
    yield api
    api.post("/clear_llm_server").raise_for_status()


def test_an_unreachable_backend_is_listed_unhealthy_with_the_reason(pool_api: httpx.Client) -> None:
    dead = f"http://127.0.0.1:{free_port()}/v1"
    started = time.monotonic()
    listed = pool_api.post("/add_llm_server", json={"address": dead})
    assert listed.status_code == 200, listed.text
    assert time.monotonic() - started < 5  # the probe is bounded (3 s)
    [backend] = listed.json()
    assert backend["healthy"] is False and "unreachable" in backend["error"], backend
    assert pool_api.get("/llm_servers").json() == listed.json()


def test_a_backend_answering_5xx_is_listed_unhealthy_with_its_status(
    pool_api: httpx.Client, broken_backend: str
) -> None:
    [backend] = pool_api.post("/add_llm_server", json={"address": broken_backend}).json()
    assert backend["healthy"] is False and "answered 500" in backend["error"], backend


def test_a_call_with_no_healthy_backend_fails_fast_naming_each_address(
    pool_api: httpx.Client, api_farm: LocalFarm, monkeypatch: pytest.MonkeyPatch
) -> None:
    dead = f"http://127.0.0.1:{free_port()}/v1"
    pool_api.post("/add_llm_server", json={"address": dead}).raise_for_status()
    monkeypatch.setenv("FARM_NO_BACKEND_WAIT_S", "1")
    get_settings.cache_clear()
    client = redis.Redis.from_url(api_farm.redis_url)
    try:
        policy = PolicyClient(BackendPool(client), "job-1", check=lambda: None, remaining=lambda: 600.0)
        started = time.monotonic()
        with pytest.raises(NoBackendAvailable) as caught:
            policy.generate([1, 2, 3], {"max_tokens": 4})
        assert time.monotonic() - started < 3
    finally:
        client.close()
        get_settings.cache_clear()
    message = str(caught.value)
    assert dead in message and "unreachable" in message and "FARM_NO_BACKEND_WAIT_S" in message, message


def test_no_backend_registered_is_said_so(
    api_farm: LocalFarm, pool_api: httpx.Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FARM_NO_BACKEND_WAIT_S", "0.2")
    get_settings.cache_clear()
    client = redis.Redis.from_url(api_farm.redis_url)
    try:
        policy = PolicyClient(BackendPool(client), "job-2", check=lambda: None, remaining=lambda: 600.0)
        with pytest.raises(NoBackendAvailable, match="none is registered"):
            policy.generate([1], {"max_tokens": 1})
    finally:
        client.close()
        get_settings.cache_clear()
