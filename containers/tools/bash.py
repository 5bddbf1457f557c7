"""A persistent bash shell on a pseudo-terminal (ptyprocess), driven command by command.

Completion is detected from a prompt carrying a per-session nonce and the exit status, so state (cwd,
exported variables, functions) survives across calls. Each command is sent as one `eval` line, which keeps
multi-line scripts to a single prompt; long scripts go through a file because a tty line holds 4095 bytes.
"""

from __future__ import annotations

import contextlib
import os
import re
import secrets
import select
import signal
import tempfile
import time

from ptyprocess import PtyProcess

from containers.tools.capture import OutputCapture
from containers.tools.serial import OneAtATime

DEFAULT_OUTPUT_LIMIT = 64 * 1024
_INLINE_LIMIT = 2000
_INTERRUPT_GRACE_S = 5.0


class BashOutput:
    __slots__ = ("exit_code", "interrupted", "output", "restarted", "timed_out")

    def __init__(
        self,
        output: str,
        exit_code: int | None,
        timed_out: bool = False,
        interrupted: bool = False,
        restarted: bool = False,
    ) -> None:
        self.output, self.exit_code = output, exit_code
        self.timed_out, self.interrupted, self.restarted = timed_out, interrupted, restarted

    def __repr__(self) -> str:
        return f"BashOutput(exit_code={self.exit_code}, timed_out={self.timed_out}, output={self.output!r})"


def ansi_c_quote(text: str) -> str:
    """Quote `text` as a bash $'...' string that survives a terminal line (no raw control bytes)."""
    out = []
    for ch in text:
        code = ord(ch)
        if ch in "\\'":
            out.append("\\" + ch)
        elif ch == "\n":
            out.append("\\n")
        elif ch == "\t":
            out.append("\\t")
        elif code < 0x20 or code == 0x7F:
            out.append(f"\\x{code:02x}")
        else:
            out.append(ch)
    return "$'" + "".join(out) + "'"


class BashSession:
    """One interactive bash; `run` is serialised, `interrupt` may be called from any thread."""

    def __init__(
        self,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        output_limit: int = DEFAULT_OUTPUT_LIMIT,
        scratch_dir: str | None = None,
    ) -> None:
        self.cwd = cwd
        self.env = dict(os.environ if env is None else env)
        self.output_limit = output_limit
        self.scratch_dir = scratch_dir or tempfile.gettempdir()
        self._calls = OneAtATime()
        self._proc: PtyProcess | None = None
        self._nonce = ""
        self._marker: re.Pattern[bytes] | None = None
        self._last_match_len = 0
        self._spawn()

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

    def _spawn(self) -> None:
        self._nonce = secrets.token_hex(8)
        self._marker = re.compile(rb"\n__FARM_" + self._nonce.encode() + rb"_(\d+)__\n")
        env = {**self.env, "TERM": "dumb", "PAGER": "cat", "GIT_PAGER": "cat", "HISTFILE": "/dev/null"}
        self._proc = PtyProcess.spawn(
            ["/bin/bash", "--norc", "--noprofile", "--noediting"],
            cwd=self.cwd,
            env=env,
            echo=False,
            dimensions=(50, 200),
        )
        setup = (
            "stty -echo -onlcr 2>/dev/null; unset PROMPT_COMMAND; PS2=''; "
            f"PS1='\\n__FARM_{self._nonce}_$?__\\n'\n"
        )
        self._proc.write(setup.encode())
        # The first prompt is the old PS1 (bash's default); wait for ours.
        result = self._read_until_prompt(time.monotonic() + 10.0)
        if result is None:
            raise RuntimeError("bash did not start")

    def _read_until_prompt(self, deadline: float, capture: OutputCapture | None = None) -> int | None:
        """Read until our prompt; returns the exit status, or None at the deadline or on EOF."""
        assert self._proc is not None and self._marker is not None
        capture = capture or OutputCapture(self.output_limit)
        fd = self._proc.fd
        window = 64 + len(self._nonce)
        while True:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return None
            ready, _, _ = select.select([fd], [], [], remaining)
            if not ready:
                return None
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                return None
            if not chunk:
                return None
            capture.feed(chunk)
            tail = capture.tail(window + len(chunk))
            match = self._marker.search(tail)
            if match:
                self._last_match_len = len(tail) - match.start()
                return int(match.group(1))

    def run(self, command: str, timeout: float = 120.0) -> BashOutput:
        with self._calls.call():
            return self._run(command, timeout)

    def _run(self, command: str, timeout: float) -> BashOutput:
        if self._proc is None or not self._proc.isalive():
            self._spawn()
        assert self._proc is not None
        script_path = None
        if len(command) > _INLINE_LIMIT:
            fd, script_path = tempfile.mkstemp(prefix=".farm-bash-", suffix=".sh", dir=self.scratch_dir)
            with os.fdopen(fd, "w") as handle:
                handle.write(command)
            line = f'eval "$(< {script_path})"\n'
        else:
            line = f"eval {ansi_c_quote(command)}\n"
        capture = OutputCapture(self.output_limit)
        try:
            self._proc.write(line.encode())
            status = self._read_until_prompt(time.monotonic() + timeout, capture)
            timed_out = status is None and self._proc.isalive()
            if timed_out:
                self.interrupt()
                status = self._read_until_prompt(time.monotonic() + _INTERRUPT_GRACE_S, capture)
        finally:
            if script_path:
                os.unlink(script_path)
        if status is not None:
            text = capture.text(strip_suffix=self._last_match_len)
            note = f"\n[command timed out after {timeout:g}s and was interrupted]" if timed_out else ""
            return BashOutput(text + note, status, timed_out=timed_out, interrupted=timed_out)
        # EOF (the shell exited) or the interrupt did not bring the prompt back: start over.
        alive = self._proc.isalive()
        self.close()
        self._spawn()
        reason = f"command timed out after {timeout:g}s" if alive else "the shell exited"
        text = capture.text() + f"\n[{reason}; started a new shell, previous state is lost]"
        return BashOutput(text, None, timed_out=alive, interrupted=alive, restarted=True)

    def interrupt(self) -> bool:
        """Send Ctrl-C to the foreground job; returns whether a command was running."""
        proc = self._proc
        if proc is None or not self._calls.busy:
            return False
        try:
            proc.write(b"\x03")
        except OSError:
            return False
        return True

    def close(self) -> None:
        proc, self._proc = self._proc, None
        if proc is None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGKILL)
        with contextlib.suppress(Exception):
            proc.close(force=True)
