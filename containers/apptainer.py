"""The Apptainer/Singularity runtime: a rootless instance (`--fakeroot --containall`, no network unless
asked) running the execution server, reached over the Unix socket in its bind-mounted control directory."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from containers.errors import RuntimeUnavailable
from containers.image_runtime import ImageRuntime, mounts_and_env
from containers.launch import server_command
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
    argv += mounts_and_env("--bind", spec, workspace, control, env)
    return [*argv, spec.image, name]


def server_exec_argv(binary: str, name: str, spec: SandboxSpec) -> list[str]:
    """Runs the execution server inside the instance (it then lives in the instance's namespaces)."""
    return [binary, "exec", f"instance://{name}", *server_command(spec, host_root=False)]


def instance_stop_argv(binary: str, name: str) -> list[str]:
    return [binary, "instance", "stop", "--force", name]


class ApptainerRuntime(ImageRuntime):
    name = "apptainer"
    find_binary = staticmethod(find_apptainer)

    def _require(self) -> str:
        if not self.binary:
            raise RuntimeUnavailable("neither apptainer nor singularity is on PATH")
        return self.binary

    def _launch(
        self, binary: str, spec: SandboxSpec, name: str, workspace: Path, control: Path, env: dict[str, str]
    ) -> None:
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

    def stop_argv(self, binary: str, name: str) -> list[str]:
        return instance_stop_argv(binary, name)


__all__ = [
    "ApptainerRuntime",
    "find_apptainer",
    "instance_start_argv",
    "instance_stop_argv",
    "server_exec_argv",
]
