"""Apptainer and Docker, for real, where their binaries (and for Docker an engine) exist; elsewhere each
test is skipped with the reason. Their command construction is unit-tested in test_units.py."""

from __future__ import annotations

import os
import socket

import pytest

from containers import SandboxSpec, attach, get_runtime
from containers.apptainer import find_apptainer
from containers.docker import docker_available, find_docker

# Images the runtimes can start without a registry: set these to a local SIF file / a pulled image.
APPTAINER_IMAGE = os.environ.get("FARM_TEST_APPTAINER_IMAGE")
DOCKER_IMAGE = os.environ.get("FARM_TEST_DOCKER_IMAGE", "python:3.11-slim")


def _apptainer_reason() -> str | None:
    if find_apptainer() is None:
        return "no apptainer or singularity binary on PATH"
    if not APPTAINER_IMAGE:
        return "set FARM_TEST_APPTAINER_IMAGE to a local .sif with python3 (no registry access in tests)"
    return None


def _docker_reason() -> str | None:
    binary = find_docker()
    if binary is None:
        return "no docker binary on PATH"
    if not docker_available(binary):
        return "the docker client is here but no Docker engine answers"
    return None


@pytest.mark.parametrize(
    ("runtime", "image", "reason"),
    [
        pytest.param("apptainer", APPTAINER_IMAGE, _apptainer_reason(), id="apptainer"),
        pytest.param("docker", DOCKER_IMAGE, _docker_reason(), id="docker"),
    ],
)
def test_start_exec_tool_attach_stop(runtime: str, image: str | None, reason: str | None) -> None:
    if reason:
        pytest.skip(reason)
    sandbox = get_runtime(runtime).start(SandboxSpec(image=image, network=False, die_with_parent=False))
    try:
        result = sandbox.exec("echo hi && id -u")
        assert result.exit_code == 0 and result.stdout.startswith("hi")
        assert sandbox.tool("bash", command="cd /tmp && export X=1").exit_code in (0, None)
        assert sandbox.tool("bash", command="echo $X $PWD").output.strip() == "1 /tmp"
        again = attach(sandbox.handle())  # as the run stage does, from the init stage's handle
        assert again.exec("cat /etc/hostname").exit_code == 0
        with socket.socket() as listener:  # a host service the sandbox must not reach: network is off
            listener.bind(("127.0.0.1", 0))
            listener.listen()
            port = listener.getsockname()[1]
            probe = f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), 2)\""
            assert sandbox.exec(probe).exit_code != 0
    finally:
        sandbox.stop()
