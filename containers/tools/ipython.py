"""A persistent IPython kernel driven through jupyter_client: state survives across calls, a call that runs
past its timeout is interrupted (and the kernel restarted if the interrupt does not land), and errors come
back as plain-text tracebacks.
"""

from __future__ import annotations

import contextlib
import os
import queue
import re
import sys
import tempfile
import threading
import time

from containers.tools.capture import OutputCapture
from containers.tools.serial import OneAtATime

TYPE_CHECKING = False  # typing costs ~10 ms of the server's start-up; its names are only annotations
if TYPE_CHECKING:
    from typing import Any

DEFAULT_OUTPUT_LIMIT = 64 * 1024
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_INTERRUPT_GRACE_S = 3.0
# History in SQLite costs a write per cell; the agent never reads it back.
_KERNEL_ARGS = ["--HistoryManager.enabled=False"]


class IPythonOutput:
    __slots__ = ("error", "output", "restarted", "timed_out")

    def __init__(self, output: str, error: bool = False, timed_out: bool = False, restarted: bool = False):
        self.output, self.error, self.timed_out, self.restarted = output, error, timed_out, restarted


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text)


class IPythonKernel:
    """One kernel per sandbox. `start()` may run in a background thread; `run` waits for it."""

    def __init__(
        self,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        python: str | None = None,
        output_limit: int = DEFAULT_OUTPUT_LIMIT,
        runtime_dir: str | None = None,
    ) -> None:
        self.cwd = cwd
        self.env = dict(os.environ if env is None else env)
        self.python = python or sys.executable
        self.output_limit = output_limit
        self.runtime_dir = runtime_dir or tempfile.mkdtemp(prefix="farm-kernel-")
        self._calls = OneAtATime()
        self._start_lock = threading.Lock()
        self._start_error: BaseException | None = None
        self._manager: Any = None
        self._client: Any = None

    def start(self) -> None:
        """Boot the kernel (once; concurrent callers wait for the first)."""
        with self._start_lock:
            if self._client is not None:
                return
            try:
                from jupyter_client.manager import KernelManager

                manager = KernelManager(
                    kernel_name="python3", transport="ipc", ip=os.path.join(self.runtime_dir, "kernel")
                )
                spec = manager.kernel_spec
                if spec is None:
                    raise RuntimeError("no python3 kernel spec is installed")
                spec.argv[0] = self.python
                manager.start_kernel(cwd=self.cwd, env=self.env, extra_arguments=_KERNEL_ARGS)
                client = manager.blocking_client()
                client.start_channels()
                client.wait_for_ready(timeout=60)
                self._manager, self._client = manager, client
                self._start_error = None
            except BaseException as exc:
                self._start_error = exc
                raise

    def start_in_background(self) -> None:
        threading.Thread(target=self._start_quietly, name="ipython-start", daemon=True).start()

    def _start_quietly(self) -> None:
        with contextlib.suppress(Exception):  # reported to the first caller of run()
            self.start()

    def _ensure_started(self) -> None:
        if self._client is None:
            self.start()

    def run(self, code: str, timeout: float = 120.0) -> IPythonOutput:
        self._ensure_started()
        with self._calls.call():
            return self._run(code, timeout)

    def _run(self, code: str, timeout: float) -> IPythonOutput:
        client = self._client
        while True:  # drop messages left over from an earlier, interrupted cell
            try:
                client.get_iopub_msg(timeout=0)
            except queue.Empty:
                break
        msg_id = client.execute(code, store_history=False, allow_stdin=False)
        capture = OutputCapture(self.output_limit)
        error = False
        deadline = time.monotonic() + timeout
        interrupted = False
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                if interrupted:
                    return self._restart(capture, timeout)
                self.interrupt()
                interrupted = True
                deadline = time.monotonic() + _INTERRUPT_GRACE_S
                continue
            try:
                msg = client.get_iopub_msg(timeout=remaining)
            except queue.Empty:
                continue
            if msg["parent_header"].get("msg_id") != msg_id:
                continue
            kind, content = msg["msg_type"], msg["content"]
            if kind == "status" and content.get("execution_state") == "idle":
                break
            if kind == "stream":
                capture.feed(content["text"].encode())
            elif kind in ("execute_result", "display_data"):
                capture.feed(self._render_data(content.get("data", {})).encode())
            elif kind == "error":
                error = True
                capture.feed((strip_ansi("\n".join(content.get("traceback", []))) + "\n").encode())
        text = capture.text()
        if interrupted:
            text += f"\n[execution timed out after {timeout:g}s and was interrupted]"
        return IPythonOutput(text, error=error or interrupted, timed_out=interrupted)

    @staticmethod
    def _render_data(data: dict[str, Any]) -> str:
        if "image/png" in data:
            return f"[image/png, {len(data['image/png'])} base64 chars]\n"
        text = str(data.get("text/plain", ""))
        return text if text.endswith("\n") else text + "\n"

    def _restart(self, capture: OutputCapture, timeout: float) -> IPythonOutput:
        self._manager.restart_kernel(now=True)
        self._client.wait_for_ready(timeout=60)
        text = capture.text() + (
            f"\n[execution timed out after {timeout:g}s; the kernel was restarted and its state is lost]"
        )
        return IPythonOutput(text, error=True, timed_out=True, restarted=True)

    def interrupt(self) -> bool:
        if self._manager is None or not self._calls.busy:
            return False
        self._manager.interrupt_kernel()
        return True

    def close(self) -> None:
        if self._client is not None:
            self._client.stop_channels()
        if self._manager is not None:
            self._manager.shutdown_kernel(now=True)
        self._manager = self._client = None
