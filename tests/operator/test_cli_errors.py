"""Every operator mistake gives one line naming what is wrong and exit code 1, through the real CLI.

Each case is a `farm` process of its own, all started together (a few at a time) when the module starts
and judged one test each: the processes spend their time importing, which two cores do side by side."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from dataclasses import dataclass

import httpx
import pytest

from farm.embedded_redis import EmbeddedRedis, free_port
from farm.launcher import _farm_healthy


def farm(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("FARM_")}
    return subprocess.run(
        [sys.executable, "-m", "farm.cli", *args],
        env={**clean, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )


def assert_one_line(result: subprocess.CompletedProcess[str], line: str) -> None:
    assert result.returncode == 1, result
    assert result.stderr == line + "\n", result.stderr
    assert "Traceback" not in result.stdout + result.stderr


@dataclass
class Ports:
    """Ports held by listening sockets for the module, and a Redis URL with a password nothing serves."""

    stack: ExitStack
    dead_redis_url: str

    def taken(self) -> int:
        s = self.stack.enter_context(socket.socket())
        s.bind(("127.0.0.1", 0))
        s.listen()
        return int(s.getsockname()[1])


TAKEN_FLAGS = [("up", "--redis-port"), ("up", "--llm-port"), ("demo", "--port"), ("demo", "--redis-port")]
DEAD_REDIS_COMMANDS = {"up": ["up", "--port"], "api": ["api", "--port"], "demo": ["demo"]}
Case = tuple[tuple[str, ...], dict[str, str], str]
"""(arguments, environment, the one line expected on stderr; "" where the test judges more itself)"""
Outcomes = Callable[[str], tuple[subprocess.CompletedProcess[str], str]]
"""A case's finished `farm` process and its expected line, by the case's name."""


def cases(ports: Ports, redis_url: str) -> dict[str, Case]:
    found: dict[str, Case] = {}
    port = ports.taken()
    found["up-taken"] = (("up", "--port", str(port)), {}, f"farm up: port {port} in use")
    for command, flag in TAKEN_FLAGS:
        port = ports.taken()
        found[f"{command}{flag}"] = ((command, flag, str(port)), {}, f"farm {command}: port {port} in use")
    port = ports.taken()
    found["api-taken"] = (
        ("api", "--port", str(port)),
        {"FARM_REDIS_URL": redis_url},
        f"farm api: port {port} in use",
    )
    port = ports.taken()
    found["demo-env-port"] = (("demo",), {"FARM_API_PORT": str(port)}, f"farm demo: port {port} in use")
    masked = ports.dead_redis_url.replace("s3cret", "***")
    for name, command in DEAD_REDIS_COMMANDS.items():
        argv = (*command, str(free_port())) if name != "demo" else tuple(command)
        line = f"farm {name}: Redis at {masked} does not answer (FARM_REDIS_URL)"
        found[f"dead-redis-{name}"] = (argv, {"FARM_REDIS_URL": ports.dead_redis_url}, line)
    debug = ("--debug", "api", "--port", str(free_port()))
    found["debug"] = (debug, {"FARM_REDIS_URL": ports.dead_redis_url}, "")
    return found


@pytest.fixture(scope="module")
def outcomes(redis_server: EmbeddedRedis) -> Iterator[Outcomes]:
    """Every case's finished `farm` process and the line it should print, by name."""
    with ExitStack() as stack:
        ports = Ports(stack, f"redis://:s3cret@127.0.0.1:{free_port()}/0")
        planned = cases(ports, redis_server.url)
        with ThreadPoolExecutor(max_workers=4) as pool:
            futures = {name: pool.submit(farm, *argv, **env) for name, (argv, env, _) in planned.items()}
            results = {name: (future.result(), planned[name][2]) for name, future in futures.items()}
        yield results.__getitem__


def test_up_on_a_taken_port_starts_nothing(outcomes: Outcomes) -> None:
    assert_one_line(*outcomes("up-taken"))


@pytest.mark.parametrize(("command", "flag"), TAKEN_FLAGS)
def test_every_port_up_and_demo_open_has_a_flag_checked_before_starting(
    command: str, flag: str, outcomes: Outcomes
) -> None:
    assert_one_line(*outcomes(f"{command}{flag}"))


def test_api_on_a_taken_port_exits(outcomes: Outcomes) -> None:
    assert_one_line(*outcomes("api-taken"))


def test_demo_honours_farm_api_port(outcomes: Outcomes) -> None:
    assert_one_line(*outcomes("demo-env-port"))


@pytest.mark.parametrize("command", sorted(DEAD_REDIS_COMMANDS))
def test_unreachable_redis_is_named_with_its_password_masked(command: str, outcomes: Outcomes) -> None:
    result, line = outcomes(f"dead-redis-{command}")
    assert_one_line(result, line)
    assert "s3cret" not in result.stdout + result.stderr


def test_debug_shows_the_traceback(outcomes: Outcomes) -> None:
    result, _ = outcomes("debug")
    assert result.returncode == 1
    assert "Traceback" in result.stderr and "FarmStartError" in result.stderr


def test_another_servers_answer_is_not_a_healthy_farm() -> None:
    assert not _farm_healthy(httpx.Response(404, json={"detail": "Not Found"}))
    assert not _farm_healthy(httpx.Response(200, text="<html>hello</html>"))
    assert not _farm_healthy(httpx.Response(503, json={"ok": False}))
    assert _farm_healthy(httpx.Response(200, json={"ok": True}))
