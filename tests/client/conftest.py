"""A stand-in farm served by a real uvicorn process on a loopback port (one per test session)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.waiting import wait_until

REPO = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _serve(token: str | None) -> Iterator[str]:
    port = _free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("STANDIN_TOKEN", None)
    if token:
        env["STANDIN_TOKEN"] = token
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "tests.client.standin_farm:app",
            "--port",
            str(port),
            "--log-level",
            "warning",
        ],
        cwd=REPO,
        env=env,
    )
    url = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        assert proc.poll() is None, "the stand-in farm exited"
        return httpx.get(f"{url}/healthz", timeout=1).status_code == 200

    try:
        wait_until(healthy, 120, interval_s=0.05, ignore=(httpx.TransportError,), what="the stand-in farm")
    except AssertionError:
        proc.kill()
        raise
    try:
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.fixture(scope="session")
def standin_server() -> Iterator[str]:
    yield from _serve(token=None)


@pytest.fixture(scope="session")
def standin_token_server() -> Iterator[str]:
    yield from _serve(token="s3cret")


@pytest.fixture
def farm_url(standin_server: str) -> str:
    """The stand-in farm with no jobs and no backends."""
    httpx.post(f"{standin_server}/standin/reset", timeout=5).raise_for_status()
    return standin_server


def standin_stats(url: str) -> dict[str, int]:
    return httpx.get(f"{url}/standin/stats", timeout=5).json()
