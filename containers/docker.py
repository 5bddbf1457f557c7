"""The Docker runtime: a container running the execution server, with the workspace and control directory
bind-mounted, no network unless asked, and the spec's limits as Docker flags as well as rlimits."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from containers.errors import RuntimeUnavailable
from containers.image_runtime import ImageRuntime, mounts_and_env
from containers.launch import server_command
from containers.spec import SandboxSpec


def find_docker() -> str | None:
    return shutil.which("docker")


def docker_available(binary: str | None) -> bool:
    """The CLI exists and an engine answers."""
    if not binary:
        return False
    try:
        return subprocess.run([binary, "info"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def run_argv(
    binary: str, spec: SandboxSpec, name: str, workspace: str, control: str, env: dict[str, str]
) -> list[str]:
    if not spec.image:
        raise ValueError("the docker runtime needs spec.image (an image reference)")
    argv = [binary, "run", "--detach", "--rm", "--name", name, "--init", "--workdir", spec.workdir]
    argv += ["--network", "bridge" if spec.network else "none"]
    argv += ["--cap-drop", "ALL", "--security-opt", "no-new-privileges"]
    limits = spec.limits
    if limits.max_processes:
        argv += ["--pids-limit", str(limits.max_processes)]
    if limits.address_space_mb:
        argv += ["--memory", f"{limits.address_space_mb}m"]
    if limits.file_size_mb:
        size = limits.file_size_mb * 1024 * 1024
        argv += ["--ulimit", f"fsize={size}:{size}"]
    argv += mounts_and_env("--volume", spec, workspace, control, env)
    return [*argv, spec.image, *server_command(spec, host_root=False)]


def remove_argv(binary: str, name: str) -> list[str]:
    return [binary, "rm", "--force", name]


class DockerRuntime(ImageRuntime):
    name = "docker"
    find_binary = staticmethod(find_docker)

    def _require(self) -> str:
        if not docker_available(self.binary):
            raise RuntimeUnavailable("no docker CLI on PATH or no engine answering `docker info`")
        assert self.binary is not None
        return self.binary

    def _launch(
        self, binary: str, spec: SandboxSpec, name: str, workspace: Path, control: Path, env: dict[str, str]
    ) -> None:
        argv = run_argv(binary, spec, name, str(workspace), str(control), env)
        subprocess.run(argv, check=True, capture_output=True, timeout=spec.start_timeout_s)

    def stop_argv(self, binary: str, name: str) -> list[str]:
        return remove_argv(binary, name)
