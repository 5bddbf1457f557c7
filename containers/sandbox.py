"""A started sandbox, whatever the runtime: commands, files and tools go through its execution server;
teardown goes through the runtime. Usable from any process on the node that has its handle."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from containers.disk_watch import raise_if_exceeded
from containers.errors import ExecServerError
from containers.exec_client import ExecClient
from containers.handle import SandboxHandle
from containers.results import ExecResult, ToolResult
from containers.server import files
from containers.tools.registry import DEFAULT_TOOL_TIMEOUT_S, call_tool

if TYPE_CHECKING:
    from containers.runtime import Runtime

DEFAULT_EXEC_TIMEOUT_S = 600.0


class Sandbox:
    def __init__(self, handle: SandboxHandle, runtime: Runtime) -> None:
        self._handle = handle
        self.runtime = runtime
        path = handle.server_socket or handle.socket_path
        address = f"unix:{path}"
        if not os.path.exists(path) and handle.tcp_address:
            address = f"tcp:{handle.tcp_address}"
        self.client = ExecClient(address)
        self._stopped = False

    @property
    def id(self) -> str:
        return self._handle.id

    @property
    def workspace(self) -> Path:
        """Host path of the workspace (same node only)."""
        return Path(self._handle.workspace)

    @property
    def workdir(self) -> str:
        return self._handle.workdir

    @property
    def loopback_ip(self) -> str | None:
        return self._handle.loopback_ip

    @property
    def info(self) -> SandboxHandle:
        return self._handle

    def handle(self) -> dict[str, Any]:
        """JSON-serialisable description; `containers.attach(handle)` re-opens it in another process."""
        return self._handle.model_dump(mode="json")

    def exec(
        self,
        cmd: str | list[str],
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout: float | None = DEFAULT_EXEC_TIMEOUT_S,
        stdin: str | None = None,
        output_limit: int | None = None,
    ) -> ExecResult:
        """Run `cmd` (a string goes to `bash -c`) in its own process group; never raises for the command's
        own failure, only when the sandbox cannot be reached."""
        args: dict[str, Any] = {"cmd": cmd, "cwd": cwd, "env": env, "timeout": timeout}
        if stdin is not None:
            args["stdin"] = stdin
        if output_limit is not None:
            args["output_limit"] = output_limit
        return ExecResult.model_validate(self._call("exec", args, timeout=timeout))

    def tool(self, name: str, timeout: float = DEFAULT_TOOL_TIMEOUT_S, **arguments: Any) -> ToolResult:
        """Run a registry tool (bash, python, editor, think, finish) with a model's arguments. Raises
        SandboxLimitExceeded once the sandbox was ended for a limit (a resource failure, no observation)."""
        try:
            result = call_tool(self.client, name, arguments, timeout=timeout)
        except ExecServerError as exc:
            raise_if_exceeded(self._handle, exc)
            raise
        if result.error:
            raise_if_exceeded(self._handle)
        return result

    def upload(self, local: str | Path, remote: str) -> None:
        """Copy a host file or directory to `remote` inside the sandbox (replacing a file, merging a dir).

        The execution server writes it, as the sandbox's user and inside the sandbox's own view, never the
        host into the workspace: a link the rollout planted there can only lead somewhere the sandbox
        could write anyway."""
        self._call("put", {"path": remote, "data": files.pack(str(local))}, timeout=300.0)

    def upload_packed(self, data: str, remote: str) -> None:
        """`upload` of an archive already made in `files.pack`'s form (e.g. read on the host as the sandbox's
        own user, handlers/host_files.py)."""
        self.client.call("put", {"path": remote, "data": data}, timeout=300.0)

    def download(self, remote: str, local: str | Path) -> None:
        """Copy a file or directory from the sandbox to the host path `local`.

        The execution server reads it inside the sandbox's view (a link to a host file leads nowhere the
        sandbox cannot read), and links are not carried to the host at all: a regular file or directory
        tree arrives, never a link a later reader on the host would follow."""
        data = self._call("get", {"path": remote}, timeout=300.0)["data"]
        files.unpack(data, str(local), links=False)

    def _call(self, op: str, args: dict[str, Any], timeout: float | None) -> Any:
        try:
            return self.client.call(op, args, timeout=timeout)
        except ExecServerError as exc:
            raise_if_exceeded(self._handle, exc)
            raise

    def cancel(self) -> dict[str, Any]:
        """Kill the commands running now and interrupt the busy tools; returns within a second."""
        answer: dict[str, Any] = self.client.call_once("cancel", timeout=1.0)
        return answer

    def quiesce(self) -> None:
        """Kill every process in the sandbox but its execution server (what a rollout left running), until
        none is left, before an evaluation runs or reads anything there. Raises ExecServerError when the
        server cannot be reached (or a process survives)."""
        self._call("quiesce", {}, timeout=10.0)

    def prepare_evaluation(
        self, files: dict[str, str] | None = None, cwd: str | None = None
    ) -> dict[str, Any]:
        """In the sandbox, as its user: the evaluation's own directory ({"dir"}), the workdir (and `cwd`)
        checked and `files` written at their names without following links; {"refused": why} when the
        sandbox's state makes that impossible (containers/server/evaluation.py). Quiesce first."""
        args = {"workdir": self.workdir, "files": files or {}, "cwd": cwd}
        answer: dict[str, Any] = self._call("prepare_evaluation", args, timeout=60.0)
        return answer

    def freeze(self, path: str | None = None, max_bytes: int | None = None) -> dict[str, Any]:
        """A directory of the sandbox (default: the workdir) as a base64 tar made inside it by its user,
        links as links ({"data", "skipped"}), or {"refused": why} (containers/freeze.py). Quiesce first."""
        args = {"path": path or self.workdir, "max_bytes": max_bytes}
        answer: dict[str, Any] = self._call("freeze", args, timeout=300.0)
        return answer

    def thaw(self, data: str, dest: str | None = None) -> dict[str, Any]:
        """Unpack a `freeze` archive into `dest` (default: the workdir) inside the sandbox."""
        answer: dict[str, Any] = self._call(
            "thaw", {"data": data, "dest": dest or self.workdir}, timeout=300.0
        )
        return answer

    def scan_named(
        self, names: list[str], skipped_dirs: list[str], root: str | None = None
    ) -> dict[str, str]:
        """Fingerprints of the entries called `names` under `root` (default: the workdir), read inside."""
        args = {"root": root or self.workdir, "names": names, "skipped_dirs": skipped_dirs}
        found: dict[str, str] = self._call("scan_named", args, timeout=120.0)["found"]
        return found

    def ping(self) -> bool:
        try:
            self.client.call_once("ping", timeout=2.0)
        except ExecServerError:
            return False
        return True

    def stop(self) -> None:
        """Tear down every process of the sandbox and remove its directories. Idempotent."""
        if self._stopped:
            return
        self._stopped = True
        self.client.close()
        self.runtime.teardown(self._handle)

    def __enter__(self) -> Sandbox:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"Sandbox(id={self.id!r}, runtime={self._handle.runtime!r})"
