"""Attacks from inside sandboxes started by the `containers` API. Each test is a real attempt; it passes
when the attack is refused."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from containers.local import LocalRuntime
from containers.sandbox import Sandbox
from containers.spec import SandboxSpec


@pytest.fixture(scope="session")
def runtime(tmp_path_factory: pytest.TempPathFactory) -> LocalRuntime:
    return LocalRuntime(root=tmp_path_factory.mktemp("security-sandboxes"))


@pytest.fixture
def sandbox(runtime: LocalRuntime) -> Iterator[Sandbox]:
    with runtime.start(SandboxSpec()) as started:
        yield started


@pytest.fixture
def host_secret(tmp_path: Path) -> Path:
    """A root-only file on the host that no sandbox may read or overwrite."""
    secret = tmp_path / "host-secret.txt"
    secret.write_text("HOST-SECRET-7731\n")
    secret.chmod(0o600)
    return secret
