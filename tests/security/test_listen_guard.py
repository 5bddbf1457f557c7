"""Secure by default: the API does not listen beyond loopback without a token (Redis's protected mode).

The real CLI, as the recipes start it: `farm api --host 0.0.0.0` without FARM_API_TOKEN exits non-zero with
one line naming the setting, before it binds anything; with a token it serves, and a request without the
token gets 401."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator

import httpx
import pytest

from farm.embedded_redis import EmbeddedRedis, free_port
from farm.web.listen_guard import InsecureListen, check_listen, is_loopback
from tests.waiting import wait_answering


def farm_env(redis_url: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("FARM_")}
    return {**env, "FARM_REDIS_URL": redis_url, **extra}


@pytest.mark.parametrize("host", ["0.0.0.0", "::"])
def test_farm_api_refuses_every_interface_without_a_token(redis_server: EmbeddedRedis, host: str) -> None:
    port = free_port()
    result = subprocess.run(
        [sys.executable, "-m", "farm.cli", "api", "--host", host, "--port", str(port)],
        env=farm_env(redis_server.url),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0
    [line] = result.stderr.strip().splitlines()
    assert "refusing to listen" in line and "FARM_API_TOKEN" in line, result.stderr


def test_farm_gateway_refuses_too(redis_server: EmbeddedRedis) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "farm.cli", "gateway", "--host", "0.0.0.0", "--port", str(free_port())],
        env=farm_env(redis_server.url),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode != 0 and "FARM_API_TOKEN" in result.stderr, result.stderr


@pytest.fixture
def exposed_api(redis_server: EmbeddedRedis) -> Iterator[int]:
    port = free_port()
    env = farm_env(redis_server.url, FARM_API_TOKEN="exposed-t0ken", FARM_API_HOST="0.0.0.0")
    proc = subprocess.Popen(
        [sys.executable, "-m", "farm.cli", "api", "--port", str(port)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_answering(f"http://127.0.0.1:{port}/healthz", 60, what="the API", interval_s=0.2)
        yield port
    finally:
        proc.terminate()
        proc.wait(30)


def test_with_a_token_it_serves_and_a_request_without_it_gets_401(exposed_api: int) -> None:
    url = f"http://127.0.0.1:{exposed_api}"
    assert httpx.get(f"{url}/status", timeout=10).status_code == 401
    assert httpx.post(f"{url}/gateway/sessions", json={}, timeout=10).status_code == 401
    auth = {"Authorization": "Bearer exposed-t0ken"}
    assert httpx.get(f"{url}/status", headers=auth, timeout=10).status_code == 200


LOOPBACK_HOSTS = ["127.0.0.1", "127.8.9.10", "::1", "[::1]", "localhost"]
OTHER_HOSTS = ["0.0.0.0", "::", "", "10.1.2.3", "192.168.0.7", "fe80::1"]


@pytest.mark.parametrize(
    ("host", "loopback"), [(h, True) for h in LOOPBACK_HOSTS] + [(h, False) for h in OTHER_HOSTS]
)
def test_what_counts_as_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback
    check_listen(host, "a-token")  # a token opens every interface
    if loopback:
        check_listen(host, None)
    else:
        with pytest.raises(InsecureListen, match="FARM_API_TOKEN"):
            check_listen(host, None)
