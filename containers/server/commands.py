"""One-shot command execution for the `exec` op: own process group, deadline, bounded output, cancel."""

from __future__ import annotations

import os
import selectors
import signal
import subprocess
import threading
import time

from containers.tools.capture import OutputCapture

TYPE_CHECKING = False  # typing costs ~10 ms of the server's start-up; its names are only annotations
if TYPE_CHECKING:
    from typing import Any

DEFAULT_OUTPUT_LIMIT = 1024 * 1024
# After the command exits, background children may still hold the pipes; read what is there, then stop.
_DRAIN_AFTER_EXIT_S = 0.05


class CommandRunner:
    """Runs commands with `bash -c`; `cancel_all` kills every running command's process group."""

    def __init__(self, base_env: dict[str, str], default_cwd: str) -> None:
        self.base_env = base_env
        self.default_cwd = default_cwd
        self._running: dict[int, subprocess.Popen[bytes]] = {}
        self._cancelled: set[int] = set()
        self._lock = threading.Lock()

    def run(
        self,
        cmd: str | list[str],
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        timeout: float | None = None,
        output_limit: int = DEFAULT_OUTPUT_LIMIT,
        stdin: str | None = None,
    ) -> dict[str, Any]:
        argv = ["/bin/bash", "-c", cmd] if isinstance(cmd, str) else list(cmd)
        started = time.monotonic()
        try:
            proc = subprocess.Popen(
                argv,
                cwd=cwd or self.default_cwd,
                env={**self.base_env, **(env or {})},
                stdin=subprocess.PIPE if stdin is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as exc:
            return {
                "stdout": "",
                "stderr": f"failed to start: {exc}",
                "exit_code": 127,
                "timed_out": False,
                "cancelled": False,
                "duration_s": time.monotonic() - started,
            }
        with self._lock:
            self._running[proc.pid] = proc
        try:
            if stdin is not None:
                self._feed_stdin(proc, stdin)
            out, err = OutputCapture(output_limit), OutputCapture(output_limit)
            timed_out = self._pump(proc, out, err, None if timeout is None else started + timeout)
            if timed_out:
                self._kill(proc)
            exit_code = proc.wait()
        finally:
            with self._lock:
                self._running.pop(proc.pid, None)
                cancelled = proc.pid in self._cancelled
                self._cancelled.discard(proc.pid)
        return {
            "stdout": out.text(),
            "stderr": err.text(),
            "exit_code": exit_code,
            "timed_out": timed_out,
            "cancelled": cancelled,
            "duration_s": time.monotonic() - started,
        }

    @staticmethod
    def _feed_stdin(proc: subprocess.Popen[bytes], data: str) -> None:
        def feed() -> None:
            assert proc.stdin is not None
            try:
                proc.stdin.write(data.encode())
                proc.stdin.close()
            except OSError:
                pass

        threading.Thread(target=feed, daemon=True).start()

    @staticmethod
    def _pump(
        proc: subprocess.Popen[bytes], out: OutputCapture, err: OutputCapture, deadline: float | None
    ) -> bool:
        """Copy stdout/stderr into the captures until EOF or the deadline; True when the deadline hit."""
        selector = selectors.DefaultSelector()
        assert proc.stdout is not None and proc.stderr is not None
        selector.register(proc.stdout, selectors.EVENT_READ, out)
        selector.register(proc.stderr, selectors.EVENT_READ, err)
        exited_at: float | None = None
        try:
            while selector.get_map():
                now = time.monotonic()
                if deadline is not None and now >= deadline:
                    return True
                if exited_at is None and proc.poll() is not None:
                    exited_at = now
                if exited_at is not None and now - exited_at > _DRAIN_AFTER_EXIT_S:
                    break
                wait = 0.05 if exited_at is None else _DRAIN_AFTER_EXIT_S
                if deadline is not None:
                    wait = min(wait, deadline - now)
                for key, _ in selector.select(max(wait, 0)):
                    chunk = os.read(key.fd, 65536)
                    if chunk:
                        key.data.feed(chunk)
                    else:
                        selector.unregister(key.fileobj)
            return False
        finally:
            selector.close()
            proc.stdout.close()
            proc.stderr.close()

    @staticmethod
    def _kill(proc: subprocess.Popen[bytes], within: float = 0.5) -> None:
        """SIGKILL the process group until it is empty: a child forked while the first signal was being
        delivered (a fork bomb) joins the group after that signal and needs another."""
        deadline = time.monotonic() + within
        while True:
            try:
                os.killpg(proc.pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                return
            proc.poll()  # reap the leader so that only live members keep the group alive
            if time.monotonic() >= deadline:
                return
            time.sleep(0.005)

    def cancel_all(self) -> int:
        with self._lock:
            procs = list(self._running.values())
            self._cancelled.update(p.pid for p in procs)
        for proc in procs:
            self._kill(proc)
        return len(procs)
