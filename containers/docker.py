"""The Docker runtime: a container running the execution server, with the workspace and control directory
bind-mounted, no network unless asked, and the spec's limits as Docker flags as well as rlimits."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from containers.errors import RuntimeUnavailable, SandboxStartError
from containers.exec_client import wait_for_socket
from containers.handle import SandboxHandle
from containers.launch import IMAGE_LIB_DIR, PACKAGE_DIR, sandbox_env, server_command
from containers.layout import check_same_node, new_sandbox, pin_server_socket
from containers.sandbox import Sandbox
from containers.server.wire import CONTROL_DIR, SOCKET_NAME
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
    argv += ["--volume", f"{workspace}:{spec.workdir}", "--volume", f"{control}:{CONTROL_DIR}"]
    argv += ["--volume", f"{PACKAGE_DIR}:{IMAGE_LIB_DIR}/containers:ro"]
    for bind in spec.ro_binds:
        argv += ["--volume", f"{bind.source}:{bind.target}:ro"]
    for key, value in sorted(env.items()):
        argv += ["--env", f"{key}={value}"]
    return [*argv, spec.image, *server_command(spec, host_root=False)]


def remove_argv(binary: str, name: str) -> list[str]:
    return [binary, "rm", "--force", name]


class DockerRuntime:
    name = "docker"

    def __init__(self, root: str | Path | None = None, binary: str | None = None) -> None:
        from containers.local import default_root

        self.root = Path(root) if root is not None else default_root()
        self.binary = binary or find_docker()

    def _require(self) -> str:
        if not docker_available(self.binary):
            raise RuntimeUnavailable("no docker CLI on PATH or no engine answering `docker info`")
        assert self.binary is not None
        return self.binary

    def start(self, spec: SandboxSpec) -> Sandbox:
        binary = self._require()
        handle, workspace, control = new_sandbox(self.root, self.name, spec)
        env = sandbox_env(spec, handle.id, host_root=False, loopback_ip=None)
        argv = run_argv(binary, spec, handle.name or "", str(workspace), str(control), env)
        try:
            subprocess.run(argv, check=True, capture_output=True, timeout=spec.start_timeout_s)
            wait_for_socket(control / SOCKET_NAME, spec.start_timeout_s)
            handle = pin_server_socket(handle)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired, SandboxStartError) as exc:
            self.teardown(handle)
            detail = (getattr(exc, "stderr", b"") or b"").decode()[-2000:]
            raise SandboxStartError(f"docker sandbox failed to start: {exc} {detail}") from exc
        return Sandbox(handle, self)

    def attach(self, handle: SandboxHandle) -> Sandbox:
        check_same_node(handle)
        return Sandbox(handle, self)

    def teardown(self, handle: SandboxHandle) -> None:
        if self.binary and handle.name:
            subprocess.run(remove_argv(self.binary, handle.name), capture_output=True, timeout=60)
        shutil.rmtree(handle.sandbox_dir, ignore_errors=True)
