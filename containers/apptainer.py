"""The Apptainer/Singularity runtime: a rootless instance (`--fakeroot --containall`, no network unless
asked) running the execution server, reached over the Unix socket in its bind-mounted control directory."""

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


def find_apptainer() -> str | None:
    return shutil.which("apptainer") or shutil.which("singularity")


def instance_start_argv(
    binary: str, spec: SandboxSpec, name: str, workspace: str, control: str, env: dict[str, str]
) -> list[str]:
    """`apptainer instance start` for a sandbox: fakeroot, containall, no network unless requested."""
    if not spec.image:
        raise ValueError("the apptainer runtime needs spec.image (a SIF file or an image URI)")
    argv = [binary, "instance", "start", "--fakeroot", "--containall", "--cleanenv", "--no-home"]
    argv += ["--pwd", spec.workdir]
    if not spec.network:
        argv += ["--network", "none"]
    argv += ["--bind", f"{workspace}:{spec.workdir}", "--bind", f"{control}:{CONTROL_DIR}"]
    argv += ["--bind", f"{PACKAGE_DIR}:{IMAGE_LIB_DIR}/containers:ro"]
    for bind in spec.ro_binds:
        argv += ["--bind", f"{bind.source}:{bind.target}:ro"]
    for key, value in sorted(env.items()):
        argv += ["--env", f"{key}={value}"]
    return [*argv, spec.image, name]


def server_exec_argv(binary: str, name: str, spec: SandboxSpec) -> list[str]:
    """Runs the execution server inside the instance (it then lives in the instance's namespaces)."""
    return [binary, "exec", f"instance://{name}", *server_command(spec, host_root=False)]


def instance_stop_argv(binary: str, name: str) -> list[str]:
    return [binary, "instance", "stop", "--force", name]


class ApptainerRuntime:
    name = "apptainer"

    def __init__(self, root: str | Path | None = None, binary: str | None = None) -> None:
        from containers.local import default_root

        self.root = Path(root) if root is not None else default_root()
        self.binary = binary or find_apptainer()

    def _require(self) -> str:
        if not self.binary:
            raise RuntimeUnavailable("neither apptainer nor singularity is on PATH")
        return self.binary

    def start(self, spec: SandboxSpec) -> Sandbox:
        binary = self._require()
        handle, workspace, control = new_sandbox(self.root, self.name, spec)
        name = handle.name or ""
        env = sandbox_env(spec, handle.id, host_root=False, loopback_ip=None)
        try:
            subprocess.run(
                instance_start_argv(binary, spec, name, str(workspace), str(control), env),
                check=True,
                capture_output=True,
                timeout=spec.start_timeout_s,
            )
            with open(control / "server.log", "ab") as log:
                subprocess.Popen(
                    server_exec_argv(binary, name, spec),
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    start_new_session=True,
                )
            wait_for_socket(control / SOCKET_NAME, spec.start_timeout_s)
            handle = pin_server_socket(handle)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired, SandboxStartError) as exc:
            self.teardown(handle)
            detail = getattr(exc, "stderr", b"") or b""
            raise SandboxStartError(
                f"apptainer sandbox failed to start: {exc} {detail.decode()[-2000:]}"
            ) from exc
        return Sandbox(handle, self)

    def attach(self, handle: SandboxHandle) -> Sandbox:
        check_same_node(handle)
        return Sandbox(handle, self)

    def teardown(self, handle: SandboxHandle) -> None:
        if self.binary and handle.name:
            subprocess.run(instance_stop_argv(self.binary, handle.name), capture_output=True, timeout=60)
        shutil.rmtree(handle.sandbox_dir, ignore_errors=True)


__all__ = [
    "ApptainerRuntime",
    "find_apptainer",
    "instance_start_argv",
    "instance_stop_argv",
    "server_exec_argv",
]
