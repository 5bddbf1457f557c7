"""What the image runtimes (Apptainer, Docker) share: a sandbox directory, an execution server started by
the runtime's CLI inside an image, reached over the Unix socket in the bind-mounted control directory, and
torn down by the CLI and by removing the directory. Each runtime supplies its CLI's argv."""

from __future__ import annotations

import contextlib
import subprocess
from abc import ABC, abstractmethod
from pathlib import Path

from containers.errors import SandboxStartError
from containers.exec_client import wait_for_socket
from containers.handle import SandboxHandle
from containers.launch import IMAGE_LIB_DIR, PACKAGE_DIR, sandbox_env
from containers.layout import check_same_node, new_sandbox, pin_server_socket
from containers.removal import remove_tree
from containers.sandbox import Sandbox
from containers.server.wire import CONTROL_DIR, SOCKET_NAME
from containers.spec import SandboxSpec


def mounts_and_env(
    mount_flag: str, spec: SandboxSpec, workspace: str, control: str, env: dict[str, str]
) -> list[str]:
    """What a container sees, as CLI flags: the workspace, the control directory, the farm's package and
    the spec's read-only binds, each as `mount_flag source:target[:ro]`; then each variable as `--env`."""
    binds = [f"{workspace}:{spec.workdir}", f"{control}:{CONTROL_DIR}"]
    binds += [f"{PACKAGE_DIR}:{IMAGE_LIB_DIR}/containers:ro"]
    binds += [f"{bind.source}:{bind.target}:ro" for bind in spec.ro_binds]
    argv = [arg for bind in binds for arg in (mount_flag, bind)]
    return argv + [arg for key, value in sorted(env.items()) for arg in ("--env", f"{key}={value}")]


class ImageRuntime(ABC):
    name: str

    def __init__(self, root: str | Path | None = None, binary: str | None = None) -> None:
        from containers.local import default_root

        self.root = Path(root) if root is not None else default_root()
        self.binary = binary or self.find_binary()

    @staticmethod
    @abstractmethod
    def find_binary() -> str | None:
        """The runtime's CLI on PATH, if any."""

    @abstractmethod
    def _require(self) -> str:
        """The CLI to run, or RuntimeUnavailable saying why there is none."""

    @abstractmethod
    def _launch(
        self, binary: str, spec: SandboxSpec, name: str, workspace: Path, control: Path, env: dict[str, str]
    ) -> None:
        """Starts the sandbox's container and its execution server (which then creates the socket)."""

    @abstractmethod
    def stop_argv(self, binary: str, name: str) -> list[str]:
        """Stops and removes the named container, whatever state it is in."""

    def start(self, spec: SandboxSpec) -> Sandbox:
        binary = self._require()
        handle, workspace, control = new_sandbox(self.root, self.name, spec)
        env = sandbox_env(spec, handle.id, host_root=False, loopback_ip=None)
        try:
            self._launch(binary, spec, handle.name or "", workspace, control, env)
            wait_for_socket(control / SOCKET_NAME, spec.start_timeout_s)
            handle = pin_server_socket(handle)
        except (subprocess.CalledProcessError, subprocess.TimeoutExpired, SandboxStartError) as exc:
            self.teardown(handle)
            detail = (getattr(exc, "stderr", b"") or b"").decode()[-2000:]
            raise SandboxStartError(f"{self.name} sandbox failed to start: {exc} {detail}") from exc
        return Sandbox(handle, self)

    def attach(self, handle: SandboxHandle) -> Sandbox:
        check_same_node(handle)
        return Sandbox(handle, self)

    def teardown(self, handle: SandboxHandle) -> None:
        if self.binary and handle.name:
            subprocess.run(self.stop_argv(self.binary, handle.name), capture_output=True, timeout=60)
        with contextlib.suppress(OSError):  # whatever the container left (depth, modes): removal.py
            remove_tree(handle.sandbox_dir)
