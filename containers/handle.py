"""A started sandbox, as data: everything another process on the same node needs to use or stop it."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class SandboxHandle(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    id: str
    runtime: str
    """Registry name of the runtime that started it: local, apptainer or docker."""
    node: str
    sandbox_dir: str
    """Host directory holding the workspace and control directory; removed by stop()."""
    workspace: str
    """Host path of the writable workspace."""
    workdir: str
    """The workspace's path inside the sandbox."""
    socket_path: str
    """Host path of the execution server's Unix socket, in the control directory the sandbox sees (and can
    write: it may replace the file with its own server's)."""
    server_socket: str | None = None
    """Host-only hard link, made at start before the rollout could run anything, to the socket the real
    server bound: the host connects here, so whatever the sandbox puts at `socket_path` never answers it."""
    tcp_address: str | None = None
    """`host:port` of the execution server's TCP fallback (network-enabled sandboxes only)."""
    loopback_ip: str | None = None
    pid: int | None = None
    """The runtime's launcher process (bwrap, apptainer); leader of the sandbox's process group."""
    pid_start: int | None = None
    """Start time of `pid` in clock ticks, so a recycled pid is never signalled."""
    init_pid: int | None = None
    """Host pid of the sandbox's pid-namespace init: killing it kills every process inside."""
    init_start: int | None = None
    cgroup: str | None = None
    """pids cgroup directory, when one was created."""
    cgroups: list[str] = Field(default_factory=list)
    """Every cgroup directory the sandbox was put in (pids, memory, cpu), removed at teardown."""
    uid: int | None = None
    """Host uid the sandbox's processes run as, when the runtime chose one (run by root): files the host
    writes into the workspace are given to it."""
    gid: int | None = None
    net_pid: int | None = None
    """Host pid of the userspace networking helper (pasta) of a networked local sandbox."""
    net_start: int | None = None
    name: str | None = None
    """Apptainer instance or Docker container name."""
    created_at: float
    expires_at: float | None = None
    disk_cap_mb: int | None = None
    """Workspace disk cap a watcher enforces (containers/disk_watch.py); None: not watched."""
    labels: dict[str, str] = Field(default_factory=dict)
    """The starter's labels (e.g. the farm job that owns it), for finding orphans."""


class SandboxClaim(BaseModel):
    """What a claim from a warm pool changes in a pooled sandbox's handle (containers/warm_pool.py)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    labels: dict[str, str]
    created_at: float
    expires_at: float | None = None
