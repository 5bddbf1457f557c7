"""Processes for the gateway tests: fake vLLM backends and the gateway itself, over loopback sockets."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from farm.embedded_redis import EmbeddedRedis, free_port
from tests.waiting import wait_until

ROOT = Path(__file__).resolve().parents[2]


def _wait_ready(url: str, process: subprocess.Popen[bytes], timeout_s: float = 120.0) -> None:
    """The deadline is for a loaded host, not the behaviour under test: a start takes about a second of
    CPU (imports), 12 s of wall time at load 13 on 2 cores; polling returns as soon as it answers."""

    def answers() -> bool:
        if process.poll() is not None:
            raise RuntimeError(f"{process.args} exited with {process.returncode}")
        return httpx.get(url, timeout=0.5).status_code < 500

    wait_until(answers, timeout_s, what=f"{url} to answer", interval_s=0.05, ignore=(httpx.HTTPError,))


def _spawn(args: list[str], ready_url: str) -> subprocess.Popen[bytes]:
    process = subprocess.Popen([sys.executable, *args], cwd=ROOT)
    try:
        _wait_ready(ready_url, process)
    except Exception:
        process.kill()
        raise
    return process


def _stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    try:
        process.wait(timeout=5)
    except subprocess.TimeoutExpired:
        process.kill()


@pytest.fixture(scope="session")
def fake_backend() -> Iterator[str]:
    """Base URL (`http://127.0.0.1:N/v1`) of a fake vLLM chat server."""
    port = free_port()
    process = _spawn(
        ["-m", "tests.gateway.fake_backend", "--port", str(port)], f"http://127.0.0.1:{port}/v1/models"
    )
    yield f"http://127.0.0.1:{port}/v1"
    _stop(process)


@pytest.fixture(scope="session")
def broken_backend() -> Iterator[str]:
    port = free_port()
    args = ["-m", "tests.gateway.fake_backend", "--port", str(port), "--fail-status", "500"]
    process = _spawn(args, f"http://127.0.0.1:{port}/v1/models")
    yield f"http://127.0.0.1:{port}/v1"
    _stop(process)


def start_gateway(redis_url: str, backends: list[str]) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    args = ["-m", "farm.gateway.cli", "--port", str(port), "--redis-url", redis_url]
    for backend in backends:
        args += ["--backend", backend]
    process = _spawn(args, f"http://127.0.0.1:{port}/healthz")
    return process, f"http://127.0.0.1:{port}"


@pytest.fixture(scope="session")
def gateway(redis_server: EmbeddedRedis, fake_backend: str) -> Iterator[str]:
    """Root URL of `farm gateway` (the CLI) pointed at the fake backend; sessions live in Redis db 2."""
    process, url = start_gateway(redis_server.url.rsplit("/", 1)[0] + "/2", [fake_backend])
    yield url
    _stop(process)


@pytest.fixture
def session(gateway: str) -> dict[str, str]:
    response = httpx.post(
        f"{gateway}/gateway/sessions", json={"task_id": "t1", "metadata": {"policy_version": 7}}
    )
    response.raise_for_status()
    return response.json()
