"""What to start: the sandbox specification shared by every runtime."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field


class ResourceLimits(BaseModel):
    """Per-process rlimits set inside the sandbox (inherited by everything it runs); None means unlimited.

    `max_processes` is RLIMIT_NPROC, which the kernel does not enforce for host root; when the farm runs
    as root the local runtime also puts the sandbox in a pids cgroup with this maximum.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    address_space_mb: int | None = Field(default=8192, gt=0)
    max_processes: int | None = Field(default=512, gt=0)
    cpu_seconds: int | None = Field(default=None, gt=0)
    file_size_mb: int | None = Field(default=4096, gt=0)
    open_files: int | None = Field(default=4096, gt=0)
    memory_mb: int | None = Field(default=4096, gt=0)
    """cgroup memory limit of the whole sandbox, tmpfs (/tmp) pages included (local runtime, as root)."""
    cpus: float | None = Field(default=None, gt=0)
    """CPU quota in cores (cgroup cpu controller; local runtime, as root)."""
    tmp_mb: int | None = Field(default=1024, gt=0)
    """Size cap of the sandbox's /tmp tmpfs."""
    disk_mb: int | None = Field(default=None, gt=0)
    """Workspace quota (local runtime, as root): the workspace is a tmpfs of this size. RAM-backed, so
    off by default; without it RLIMIT_FSIZE (`file_size_mb`) caps each file only."""


class ReadOnlyBind(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    source: str
    """Host path."""
    target: str
    """Path inside the sandbox."""


class SandboxSpec(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    image: str | None = None
    """Local runtime: None for the host root, or a root filesystem directory. Apptainer: a SIF path or URI.
    Docker: an image reference."""
    network: bool = False
    """Off: a private network namespace with only its own loopback. On (local runtime): a private network
    namespace with userspace networking (pasta): egress as an unprivileged host process, but neither the
    host's loopback nor any other sandbox."""
    relay_port: int | None = Field(default=None, ge=1, le=65535)
    """A TCP port on the sandbox's own loopback whose connections are carried to the Unix socket
    `relay.sock` in its control directory, which the host serves only while it grants access
    (`containers.host_relay`, which also decides which requests pass): how a harness reaches exactly its
    own gateway session, whatever the sandbox's network."""
    host_ports: list[int] = Field(default_factory=list)
    """Networked local sandboxes: TCP ports of the host's loopback the sandbox may reach, at the same port
    on its own 127.0.0.1 (e.g. the model gateway a harness talks to). Nothing else on the host loopback."""
    root_inside: bool = False
    """Run as uid 0 inside the user namespace (still an unprivileged uid on the host); default uid 1000."""
    limits: ResourceLimits = ResourceLimits()
    env: dict[str, str] = Field(default_factory=dict)
    """Added to a clean environment; nothing leaks from the host process."""
    workdir: str = "/workspace"
    """Where the writable per-sandbox workspace is mounted; commands start here."""
    ro_binds: list[ReadOnlyBind] = Field(default_factory=list)
    hide: list[str] = Field(default_factory=list)
    """Host paths (directories) masked by an empty tmpfs inside a host-root sandbox."""
    die_with_parent: bool = True
    """Kill the sandbox when the process that started it exits. Set False when a stage task starts the
    sandbox and a later stage in another process uses it; it then lives until stop() or `ttl_s`."""
    ttl_s: float | None = Field(default=None, gt=0)
    """Self-destruct after this many seconds (the execution server exits, taking every process along)."""
    labels: dict[str, str] = Field(default_factory=dict)
    """Copied onto the handle: who owns the sandbox (the farm sets `job_id`), so a sweep can find orphans."""
    warm_tools: list[str] = Field(default_factory=list)
    """Tools to start with the sandbox, e.g. ["python"] to boot the IPython kernel in the background."""
    python: str | None = None
    """Interpreter for the execution server inside the sandbox: default this process's interpreter for the
    host root, `python3` for images (which must provide ptyprocess, and jupyter_client for `python`)."""
    start_timeout_s: float = Field(default=30.0, gt=0)
