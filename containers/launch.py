"""How a runtime starts the execution server inside a sandbox: interpreter, import path and arguments."""

from __future__ import annotations

import compileall
import contextlib
import functools
import json
import os
import sys
from pathlib import Path

from containers.server.wire import CONTROL_DIR, RELAY_SOCKET_NAME, SOCKET_NAME
from containers.spec import SandboxSpec

PACKAGE_DIR = Path(__file__).resolve().parent
IMAGE_LIB_DIR = "/opt/rollout-farm"
"""Where runtimes bind this package inside an image (as IMAGE_LIB_DIR/containers)."""
BASE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
SANDBOX_WRITABLE_DIRS = ("/tmp", "/var/tmp", "/dev/shm", "/run/farm")
"""Directories every sandbox can write besides its workspace (each its own): nothing the host trusts lies
there, and an evaluation's PATH never holds them."""


def host_interpreter_in_writable_dir() -> str | None:
    """The farm's interpreter directory, which a sandbox without an image finds first on PATH, when it lies
    under a sandbox-writable directory (a venv under /tmp): evaluations then refuse to run."""
    bin_dir = os.path.dirname(sys.executable)
    return bin_dir if any(beneath(bin_dir, d) for d in SANDBOX_WRITABLE_DIRS) else None


def beneath(path: str, parent: str) -> bool:
    """`path` is `parent` or lies under it (both normalised, absolute)."""
    return path == parent or path.startswith(parent.rstrip("/") + "/")


@functools.cache
def ensure_bytecode() -> None:
    """Compile this package once on the host: the sandbox sees it read-only and could not cache bytecode,
    so every execution server would recompile it at start-up (several times its import cost)."""
    with contextlib.suppress(OSError):
        compileall.compile_dir(str(PACKAGE_DIR), quiet=2)


def host_import_path() -> list[str]:
    """This interpreter's import path with this package's parent first (host-root sandboxes see it all)."""
    paths = [str(PACKAGE_DIR.parent)]
    for entry in sys.path:
        if entry and os.path.isdir(entry) and entry not in paths:
            paths.append(entry)
    return paths


def server_command(
    spec: SandboxSpec,
    *,
    host_root: bool,
    ready_fd: int | None = None,
) -> list[str]:
    """argv of the execution server. For the host root it runs this interpreter with -S and an explicit
    import path (site processing would triple its start-up time); in an image, the image's python3."""
    if host_root:
        python, flags, paths = spec.python or sys.executable, ["-S"], host_import_path()
    else:
        python, flags, paths = spec.python or "python3", [], [IMAGE_LIB_DIR]
    boot = (
        f"import sys; sys.path[:0] = {paths!r}; from containers.server.main import main; main(sys.argv[1:])"
    )
    config: dict[str, object] = {
        "socket": f"{CONTROL_DIR}/{SOCKET_NAME}",
        "workdir": spec.workdir,
        "limits": spec.limits.model_dump(),
        "warm": spec.warm_tools,
        "ttl": spec.ttl_s,
        "ready_fd": ready_fd,
        "python": python if (spec.python or host_root) else None,
        "relay": [spec.relay_port, f"{CONTROL_DIR}/{RELAY_SOCKET_NAME}"] if spec.relay_port else None,
    }
    argv = [python, *flags, "-c", boot, json.dumps(config, separators=(",", ":"))]
    return argv


def sandbox_env(
    spec: SandboxSpec, sandbox_id: str, *, host_root: bool, loopback_ip: str | None = None
) -> dict[str, str]:
    """The whole environment inside a sandbox: a clean base plus the spec's variables. The local runtime
    spawns its launcher with exactly this environment (bwrap's in-namespace init keeps its own)."""
    path = BASE_PATH
    if host_root:
        path = f"{os.path.dirname(sys.executable)}:{path}"
    env = {
        "PATH": path,
        "HOME": spec.workdir,
        "LANG": "C.UTF-8",
        "TMPDIR": "/tmp",
        # glibc reserves 64 MB of address space per malloc arena; keep threaded programs under RLIMIT_AS.
        "MALLOC_ARENA_MAX": "2",
        "FARM_SANDBOX_ID": sandbox_id,
        "FARM_WORKDIR": spec.workdir,
    }
    if loopback_ip:
        env["FARM_LOOPBACK_IP"] = loopback_ip
    return {**env, **spec.env}
