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


SOURCE_MARKERS = ("pyproject.toml", ".git", "farm-runs")
"""A directory holding one of these is a checkout of a project (or a farm's run directory): its task data,
answers, run files and history stay on the host."""


def _is_source_root(path: str) -> bool:
    return path != "/" and any(os.path.lexists(os.path.join(path, m)) for m in SOURCE_MARKERS)


def _editable_source() -> str | None:
    """The directory this project was installed from in editable mode (pip's direct_url.json), if any."""
    try:
        from importlib.metadata import PackageNotFoundError, distribution

        raw = distribution("rollout-farm").read_text("direct_url.json")
    except (ImportError, PackageNotFoundError, OSError):
        return None
    try:
        found = json.loads(raw or "{}")
    except ValueError:
        return None
    url = str(found.get("url", ""))
    editable = bool(found.get("dir_info", {}).get("editable"))
    return url.removeprefix("file://") if editable and url.startswith("file:///") else None


def interpreter_prefixes() -> list[str]:
    """The directories of the running interpreter: its venv and the installation it was made from."""
    return list(dict.fromkeys(os.path.realpath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix)))


@functools.cache
def project_roots() -> tuple[list[str], list[str]]:
    """(checkouts to hide from every sandbox, checkouts that cannot be hidden). The checkouts are this
    package's parent, an editable install's source, source directories on the import path and the working
    directory, wherever they lie: a sandbox gets back only this package and the interpreter's venv
    (`host_paths_for_server`). One that holds the interpreter's own installation (not a venv inside it)
    cannot be hidden."""
    candidates = [str(PACKAGE_DIR.parent), _editable_source() or "", *sys.path]
    with contextlib.suppress(OSError):
        candidates.append(os.getcwd())
    prefixes = interpreter_prefixes()
    roots = list(
        dict.fromkeys(
            os.path.realpath(c)
            for c in candidates
            if c and os.path.isabs(c) and os.path.isdir(c) and _is_source_root(os.path.realpath(c))
        )
    )
    # the interpreter's own installation (stdlib) may not lie in a checkout; a venv inside one may
    system = [p for p in prefixes if not os.path.exists(os.path.join(p, "pyvenv.cfg"))]
    hideable = [r for r in roots if not any(beneath(p, r) for p in system)]
    return hideable, [r for r in roots if r not in hideable]


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
