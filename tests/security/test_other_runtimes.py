"""The attacks that apply to every runtime, against Docker and Apptainer where their engines exist (each
skipped with the reason elsewhere, as on the CI machine): no worker secret inside, no host loopback
service reachable with the network off, no write to the image root, no capability."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from containers import Sandbox, SandboxSpec, get_runtime
from tests.containers.test_other_runtimes import (
    APPTAINER_IMAGE,
    DOCKER_IMAGE,
    _apptainer_reason,
    _docker_reason,
)

RUNTIMES = [
    pytest.param(("apptainer", APPTAINER_IMAGE, _apptainer_reason()), id="apptainer"),
    pytest.param(("docker", DOCKER_IMAGE, _docker_reason()), id="docker"),
]


@pytest.fixture(params=RUNTIMES)
def other(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Sandbox]:
    name, image, reason = request.param
    if reason:
        pytest.skip(reason)
    monkeypatch.setenv("FARM_API_TOKEN", "SECRET-TOKEN-4242")
    with get_runtime(name).start(SandboxSpec(image=image, network=False)) as sandbox:
        yield sandbox


def test_no_worker_secret_inside(other: Sandbox) -> None:
    result = other.exec("cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'; env")
    assert "SECRET-TOKEN-4242" not in result.stdout


def test_host_loopback_is_out_of_reach(other: Sandbox) -> None:
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        probe = f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), 2)\""
        assert other.exec(probe).exit_code != 0


def test_the_root_is_not_writable_and_no_capability_is_held(other: Sandbox) -> None:
    assert other.exec("echo x > /usr/escape").exit_code != 0
    status = other.exec("grep CapEff /proc/self/status").stdout
    assert status.split()[-1] in ("0000000000000000", "")
