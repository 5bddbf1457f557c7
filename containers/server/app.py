"""The execution server: a threaded stream server on a Unix socket only (no TCP listener: nothing on any
network reaches it), dispatching ops to the command runner, file transfer and the tool backends.
"""

from __future__ import annotations

import contextlib
import os
import socketserver
import threading
from collections.abc import Callable

from containers.server import files, wire
from containers.server.commands import CommandRunner

TYPE_CHECKING = False  # typing costs ~10 ms of the server's start-up; its names are only annotations
if TYPE_CHECKING:
    from typing import Any

    from containers.tools.bash import BashSession
    from containers.tools.editor import FileEditor
    from containers.tools.ipython import IPythonKernel


class ToolBox:
    """The per-sandbox tool backends, imported and created on first use (the kernel optionally pre-warmed)."""

    def __init__(self, workdir: str, env: dict[str, str], python: str) -> None:
        self.workdir, self.env, self.python = workdir, env, python
        self._bash: BashSession | None = None
        self._kernel: IPythonKernel | None = None
        self._editor: FileEditor | None = None
        self._lock = threading.Lock()

    @property
    def bash(self) -> BashSession:
        with self._lock:
            if self._bash is None:
                from containers.tools.bash import BashSession

                self._bash = BashSession(cwd=self.workdir, env=self.env)
            return self._bash

    @property
    def kernel(self) -> IPythonKernel:
        with self._lock:
            if self._kernel is None:
                from containers.tools.ipython import IPythonKernel

                self._kernel = IPythonKernel(cwd=self.workdir, env=self.env, python=self.python)
            return self._kernel

    @property
    def editor(self) -> FileEditor:
        with self._lock:
            if self._editor is None:
                from containers.tools.editor import FileEditor

                self._editor = FileEditor(self.workdir)
            return self._editor

    def warm(self, names: list[str]) -> None:
        if {"python", "ipython"} & set(names):
            self.kernel.start_in_background()
        if "bash" in names:
            _ = self.bash

    def interrupt(self) -> list[str]:
        interrupted = []
        if self._bash is not None and self._bash.interrupt():
            interrupted.append("bash")
        if self._kernel is not None and self._kernel.interrupt():
            interrupted.append("python")
        return interrupted

    def forget(self) -> None:
        """Close and drop the (killed) tool backends; the next call starts fresh ones."""
        with self._lock:
            bash, kernel, self._bash, self._kernel = self._bash, self._kernel, None, None
        for backend in (bash, kernel):
            if backend is not None:
                with contextlib.suppress(Exception):  # already dead: nothing left to close
                    backend.close()

    def close(self) -> None:
        if self._bash is not None:
            self._bash.close()
        if self._kernel is not None:
            self._kernel.close()


class ExecService:
    """Maps op names to handlers; every handler takes keyword args and returns JSON-able data."""

    def __init__(self, workdir: str, env: dict[str, str], python: str, on_shutdown: Callable[[], None]):
        self.runner = CommandRunner(env, workdir)
        self.tools = ToolBox(workdir, env, python)
        self._on_shutdown = on_shutdown
        self._ttl_timer: threading.Timer | None = None
        self._ttl_lock = threading.Lock()
        self.ops: dict[str, Callable[..., Any]] = {
            "ping": self.ping,
            "exec": self.runner.run,
            "put": self.put,
            "get": self.get,
            "bash": self.bash,
            "ipython": self.ipython,
            "editor": self.editor,
            "cancel": self.cancel,
            "quiesce": self.quiesce,
            "prepare_evaluation": self.prepare_evaluation,
            "freeze": self.freeze,
            "thaw": self.thaw,
            "scan_named": self.scan_named,
            "shutdown": self.shutdown,
            "ttl": self.set_ttl,
        }

    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        op = self.ops.get(request.get("op", ""))
        if op is None:
            return {"id": request.get("id"), "ok": False, "error": f"unknown op {request.get('op')!r}"}
        try:
            return {"id": request.get("id"), "ok": True, "result": op(**request.get("args", {}))}
        except Exception as exc:
            return {"id": request.get("id"), "ok": False, "error": f"{type(exc).__name__}: {exc}"}

    @staticmethod
    def ping() -> dict[str, Any]:
        return {"pid": os.getpid()}

    @staticmethod
    def put(path: str, data: str) -> dict[str, Any]:
        files.unpack(data, path)
        return {"path": path}

    @staticmethod
    def get(path: str) -> dict[str, Any]:
        return {"data": files.pack(path)}

    def bash(self, command: str, timeout: float = 120.0) -> dict[str, Any]:
        result = self.tools.bash.run(command, timeout=timeout)
        return {
            "output": result.output,
            "exit_code": result.exit_code,
            "timed_out": result.timed_out,
            "error": result.exit_code != 0,
        }

    def ipython(self, code: str, timeout: float = 120.0) -> dict[str, Any]:
        result = self.tools.kernel.run(code, timeout=timeout)
        return {"output": result.output, "error": result.error, "timed_out": result.timed_out}

    def editor(self, command: str, path: str, **args: Any) -> dict[str, Any]:
        result = self.tools.editor(command, path, **args)
        return {"output": result.output, "error": result.error}

    def cancel(self) -> dict[str, Any]:
        return {"commands": self.runner.cancel_all(), "tools": self.tools.interrupt()}

    def quiesce(self) -> dict[str, Any]:
        """SIGKILL every process of the sandbox but this server and the namespace's init, until none is
        left: what the rollout left running (daemons that escaped their process group, the tool shells)
        must not touch what an evaluation runs or reads next (containers/server/evaluation.py)."""
        from containers.server import evaluation

        self.runner.cancel_all()
        self.tools.interrupt()
        stopped = evaluation.stop_others()
        self.tools.forget()
        if stopped["left"]:
            raise RuntimeError(
                f"processes {stopped['left'][:10]} survived {stopped['rounds']} rounds of SIGKILL"
            )
        return {"pid": os.getpid(), "rounds": stopped["rounds"]}

    @staticmethod
    def prepare_evaluation(
        workdir: str, files: dict[str, str] | None = None, cwd: str | None = None
    ) -> dict[str, Any]:
        """The evaluation's own directory, the workdir (and cwd) checked, `files` placed: {"dir"} or
        {"refused": why} (the sandbox's state makes the evaluation impossible)."""
        from containers.server import evaluation

        made = evaluation.evaluation_dir()
        if "refused" in made:
            return made
        for directory in dict.fromkeys([workdir, *([cwd] if cwd else [])]):
            checked = evaluation.check_dir(directory)
            if "refused" in checked:
                return {**made, **checked}
        placed = evaluation.place_files(workdir, files or {})
        return {**made, **placed}

    @staticmethod
    def freeze(path: str, max_bytes: int | None = None) -> dict[str, Any]:
        """`path` as a base64 tar made here (containers/freeze.py), or {"refused": why}."""
        import base64

        from containers import freeze

        try:
            data, skipped = freeze.freeze(path, max_bytes=max_bytes or freeze.MAX_FREEZE_BYTES)
        except freeze.Refused as exc:
            return {"refused": str(exc)}
        return {"data": base64.b64encode(data).decode(), "skipped": skipped[:100]}

    @staticmethod
    def thaw(data: str, dest: str) -> dict[str, Any]:
        import base64
        import tarfile

        from containers import freeze

        try:
            left_out = freeze.thaw(base64.b64decode(data), dest)
        except (OSError, tarfile.TarError) as exc:
            return {"refused": f"the workspace copy cannot be unpacked: {exc}"}
        return {"left_out": left_out[:100]}

    @staticmethod
    def scan_named(root: str, names: list[str], skipped_dirs: list[str]) -> dict[str, Any]:
        from containers import freeze

        return {"found": freeze.scan_named(root, frozenset(names), frozenset(skipped_dirs))}

    def shutdown(self) -> dict[str, Any]:
        threading.Thread(target=self._on_shutdown, daemon=True).start()
        return {}

    def set_ttl(self, seconds: float | None) -> dict[str, Any]:
        """Exit `seconds` from now (None: never), replacing the previous deadline: a pooled sandbox is
        started with the pool's idle bound and given its job's budget when a job claims it."""
        with self._ttl_lock:
            if self._ttl_timer is not None:
                self._ttl_timer.cancel()
            self._ttl_timer = None
            if seconds:
                self._ttl_timer = threading.Timer(float(seconds), self._on_shutdown)
                self._ttl_timer.daemon = True
                self._ttl_timer.start()
        return {"ttl": seconds}


class Handler(socketserver.StreamRequestHandler):
    server: _Server

    def handle(self) -> None:
        for line in self.rfile:
            try:
                request = wire.decode(line)
            except ValueError as exc:
                self.wfile.write(wire.encode({"id": None, "ok": False, "error": f"bad request: {exc}"}))
                continue
            self.wfile.write(wire.encode(self.server.service.handle(request)))
            self.wfile.flush()


class _Server(socketserver.ThreadingMixIn, socketserver.BaseServer):
    daemon_threads = True
    service: ExecService


class UnixServer(_Server, socketserver.UnixStreamServer):
    pass


def serve(service: ExecService, servers: list[_Server]) -> None:
    """Serve on every listener until shutdown; the last one runs in the calling thread."""
    for server in servers:
        server.service = service
    for server in servers[:-1]:
        threading.Thread(target=server.serve_forever, daemon=True).start()
    servers[-1].serve_forever(poll_interval=0.5)
