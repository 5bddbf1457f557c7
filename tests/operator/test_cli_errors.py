"""Every operator mistake gives one line naming what is wrong and exit code 1, through the real CLI."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator

import httpx
import pytest

from farm.embedded_redis import free_port
from farm.launcher import _farm_healthy


@pytest.fixture
def taken_port() -> Iterator[int]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        yield s.getsockname()[1]


@pytest.fixture
def dead_redis_url() -> str:
    return f"redis://:s3cret@127.0.0.1:{free_port()}/0"


def farm(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FARM_")}
    return subprocess.run(
        [sys.executable, "-m", "farm.cli", *args],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=60,
    )


def assert_one_line(result: subprocess.CompletedProcess[str], line: str) -> None:
    assert result.returncode == 1, result
    assert result.stderr == line + "\n", result.stderr
    assert "Traceback" not in result.stdout + result.stderr


def test_up_on_a_taken_port_starts_nothing(taken_port: int) -> None:
    assert_one_line(farm("up", "--port", str(taken_port)), f"farm up: port {taken_port} in use")


@pytest.mark.parametrize(
    ("command", "flag"),
    [("up", "--redis-port"), ("up", "--llm-port"), ("demo", "--port"), ("demo", "--redis-port")],
)
def test_every_port_up_and_demo_open_has_a_flag_checked_before_starting(
    command: str, flag: str, taken_port: int
) -> None:
    assert_one_line(farm(command, flag, str(taken_port)), f"farm {command}: port {taken_port} in use")


def test_api_on_a_taken_port_exits(taken_port: int, redis_url: str) -> None:
    result = farm("api", "--port", str(taken_port), FARM_REDIS_URL=redis_url)
    assert_one_line(result, f"farm api: port {taken_port} in use")


def test_demo_honours_farm_api_port(taken_port: int) -> None:
    assert_one_line(farm("demo", FARM_API_PORT=str(taken_port)), f"farm demo: port {taken_port} in use")


@pytest.mark.parametrize("command", [["up", "--port", "0"], ["api", "--port", "0"], ["demo"]])
def test_unreachable_redis_is_named_with_its_password_masked(command: list[str], dead_redis_url: str) -> None:
    if command[0] != "demo":
        command = [*command[:-1], str(free_port())]
    masked = dead_redis_url.replace("s3cret", "***")
    result = farm(*command, FARM_REDIS_URL=dead_redis_url)
    assert_one_line(result, f"farm {command[0]}: Redis at {masked} does not answer (FARM_REDIS_URL)")
    assert "s3cret" not in result.stdout + result.stderr


def test_debug_shows_the_traceback(dead_redis_url: str) -> None:
    result = farm("--debug", "api", "--port", str(free_port()), FARM_REDIS_URL=dead_redis_url)
    assert result.returncode == 1
    assert "Traceback" in result.stderr and "FarmStartError" in result.stderr


def test_another_servers_answer_is_not_a_healthy_farm() -> None:
    assert not _farm_healthy(httpx.Response(404, json={"detail": "Not Found"}))
    assert not _farm_healthy(httpx.Response(200, text="<html>hello</html>"))
    assert not _farm_healthy(httpx.Response(503, json={"ok": False}))
    assert _farm_healthy(httpx.Response(200, json={"ok": True}))
