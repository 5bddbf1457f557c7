"""What the image runtimes (Apptainer, Docker) share around their engine calls: a sandbox's
directories and handle on this node, and attaching only on the node that started it."""

from __future__ import annotations

import os
import socket
import stat
import time
import uuid
from pathlib import Path

from containers.errors import SandboxError, SandboxStartError
from containers.handle import SandboxHandle
from containers.server.wire import SOCKET_NAME
from containers.spec import SandboxSpec


def new_sandbox(root: Path, runtime: str, spec: SandboxSpec) -> tuple[SandboxHandle, Path, Path]:
    """Creates `<root>/<id>/{workspace,control}` (mode 700); returns the handle, workspace, control."""
    sandbox_id = uuid.uuid4().hex[:12]
    sandbox_dir = root / sandbox_id
    workspace, control = sandbox_dir / "workspace", sandbox_dir / "control"
    for path in (sandbox_dir, workspace, control):
        path.mkdir(parents=True, mode=0o700)
    now = time.time()
    handle = SandboxHandle(
        id=sandbox_id,
        runtime=runtime,
        node=socket.gethostname(),
        sandbox_dir=str(sandbox_dir),
        workspace=str(workspace),
        workdir=spec.workdir,
        socket_path=str(control / SOCKET_NAME),
        name=f"farm-{sandbox_id}",
        created_at=now,
        expires_at=now + spec.ttl_s if spec.ttl_s else None,
        labels=spec.labels,
    )
    return handle, workspace, control


PINNED_SOCKET = "server.sock"


def pin_server_socket(handle: SandboxHandle) -> SandboxHandle:
    """Hard-links the socket the execution server bound into the sandbox directory, which the sandbox
    never sees, and names the link in the handle: the host's channel is then that very socket in every
    process that attaches, whatever the rollout later puts in the control directory (it can remove or
    replace the name there, not the socket the link holds). Call once the server is ready and before
    anything of the rollout runs."""
    pinned = Path(handle.sandbox_dir) / PINNED_SOCKET
    try:
        os.link(handle.socket_path, pinned, follow_symlinks=False)
        if not stat.S_ISSOCK(os.lstat(pinned).st_mode):
            raise SandboxStartError(f"{handle.socket_path} is not a socket")
    except OSError as exc:
        raise SandboxStartError(f"cannot pin the execution server's socket: {exc}") from exc
    return handle.model_copy(update={"server_socket": str(pinned)})


def check_same_node(handle: SandboxHandle) -> None:
    if handle.node != socket.gethostname():
        raise SandboxError(f"sandbox {handle.id} lives on node {handle.node}")
