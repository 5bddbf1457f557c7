"""Flower as the README starts it (`celery -A farm flower`), in its own process on a free port, for the
operator tests that check how it listens, authenticates and stops."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from farm.embedded_redis import free_port
from farm.flower_guard import ALLOW_OPEN_ENV
from tests.waiting import wait_answering


def flower_argv(port: int, *options: str) -> list[str]:
    return [sys.executable, "-m", "celery", "-A", "farm", "flower", f"--port={port}", *options]


def flower_env(redis_url: str) -> dict[str, str]:
    """This environment without Flower's own settings or the farm's open-address override, on `redis_url`."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FLOWER_") and k != ALLOW_OPEN_ENV}
    return {**env, "FARM_REDIS_URL": redis_url}


@dataclass(frozen=True)
class Flower:
    process: subprocess.Popen[bytes]
    port: int

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


@contextlib.contextmanager
def running_flower(
    redis_url: str,
    *options: str,
    log: Path | None = None,
    ready: str = "/healthcheck",
    auth: tuple[str, str] | None = None,
) -> Iterator[Flower]:
    """Flower on `redis_url`, once GET `ready` answers it 200 (with `auth`); its output to `log` (else
    nowhere). Stopped on leaving unless the test stopped it."""
    port = free_port()
    with open(log or os.devnull, "wb") as out:
        process = subprocess.Popen(
            flower_argv(port, *options), env=flower_env(redis_url), stdout=out, stderr=subprocess.STDOUT
        )
    flower = Flower(process, port)
    try:
        wait_answering(f"{flower.url}{ready}", 90, what=f"Flower to answer {ready}", request_s=5, auth=auth)
        yield flower
    finally:
        process.terminate()  # nothing once it has exited (a test may stop it itself)
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(30)
        process.kill()
        process.wait()
