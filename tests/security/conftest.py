"""Fixtures for the attack suite: a local (bubblewrap) runtime whose host process carries fake secrets."""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from containers.bwrap import find_bwrap
from containers.local import LocalRuntime
from containers.net_check import network_unavailable
from containers.sandbox import Sandbox
from containers.spec import SandboxSpec

FAKE_TOKEN = "farm-secret-token-4b1d"
FAKE_REDIS_PASSWORD = "redis-pw-9c7e"


@contextmanager
def host_secrets() -> Iterator[None]:
    """The worker's environment as in production while a sandbox starts: an API token and a Redis URL with
    a password. Scoped to the start, not the session: a farm started by another test must not see a token."""
    saved = {k: os.environ.get(k) for k in ("FARM_API_TOKEN", "FARM_REDIS_URL")}
    os.environ["FARM_API_TOKEN"] = FAKE_TOKEN
    os.environ["FARM_REDIS_URL"] = f"redis://:{FAKE_REDIS_PASSWORD}@127.0.0.1:1/0"
    yield
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture(scope="session")
def runtime(tmp_path_factory: pytest.TempPathFactory) -> LocalRuntime:
    if find_bwrap() is None:
        pytest.skip("bubblewrap is not installed")
    return LocalRuntime(root=tmp_path_factory.mktemp("attack-sandboxes"))


@pytest.fixture(scope="module", params=[False, True], ids=["net-off", "net-on"])
def sandbox(runtime: LocalRuntime, request: pytest.FixtureRequest) -> Iterator[Sandbox]:
    if request.param and network_unavailable() is not None:
        pytest.skip(str(network_unavailable()))
    with host_secrets():
        started = runtime.start(SandboxSpec(network=request.param))
    with started:
        yield started


def secret_found(text: str) -> bool:
    return FAKE_TOKEN in text or FAKE_REDIS_PASSWORD in text


__all__ = ["FAKE_REDIS_PASSWORD", "FAKE_TOKEN", "Path", "secret_found"]


@pytest.fixture
def host_secret(tmp_path: Path) -> Path:
    """A root-only file on the host that no sandbox may read or overwrite (from the defender branch)."""
    secret = tmp_path / "host-secret.txt"
    secret.write_text("HOST-SECRET-7731\n")
    secret.chmod(0o600)
    return secret
