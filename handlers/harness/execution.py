"""Running a long command in a sandbox while the job can still be cancelled: the command runs in a thread,
the stage's thread keeps asking `ctx.check()`, and an interruption kills the command."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from containers import Sandbox
from containers.errors import ExecServerError
from containers.results import ExecResult
from farm.errors import JobInterrupted

log = logging.getLogger(__name__)
POLL_S = 0.1
CANCEL_GRACE_S = 10.0
"""How long to wait for the command's answer after cancelling it."""


@dataclass
class Interrupted:
    """The command was stopped because the job was interrupted; `result` is what it had printed."""

    error: JobInterrupted
    result: ExecResult | None


@dataclass
class _Box:
    """What the command's thread hands back to the stage's thread."""

    result: ExecResult | None = None
    error: BaseException | None = None


def run_interruptible(
    sandbox: Sandbox,
    cmd: str | list[str],
    check: Callable[[], None],
    *,
    timeout: float,
    cwd: str | None = None,
    env: dict[str, str] | None = None,
    stdin: str | None = None,
    output_limit: int | None = None,
) -> ExecResult | Interrupted:
    """The command's result, or Interrupted when `check` raised while it ran (the command is killed)."""
    box = _Box()

    def target() -> None:
        try:
            box.result = sandbox.exec(
                cmd, cwd=cwd, env=env, timeout=timeout, stdin=stdin, output_limit=output_limit
            )
        except BaseException as exc:  # handed to the stage's thread
            box.error = exc

    worker = threading.Thread(target=target, name=f"sandbox-exec-{sandbox.id}", daemon=True)
    worker.start()
    try:
        while worker.is_alive():
            check()
            worker.join(POLL_S)
    except JobInterrupted as exc:
        _cancel(sandbox)
        worker.join(CANCEL_GRACE_S)
        return Interrupted(exc, box.result)
    if box.error is not None:
        raise box.error
    assert box.result is not None  # the thread has ended, so it either returned or raised
    return box.result


def _cancel(sandbox: Sandbox) -> None:
    for _ in range(3):
        try:
            sandbox.cancel()
            return
        except ExecServerError:
            log.warning("cancelling the command in sandbox %s failed; retrying", sandbox.id)
            time.sleep(0.2)


def checked_exec(sandbox: Sandbox, check: Callable[[], None]) -> Callable[..., ExecResult]:
    """A `sandbox.exec` look-alike that stops at an interruption by raising it (init's prepare steps)."""

    def execute(cmd: str | list[str], **kwargs: Any) -> ExecResult:
        timeout = kwargs.pop("timeout", 600.0)
        outcome = run_interruptible(sandbox, cmd, check, timeout=timeout, **kwargs)
        if isinstance(outcome, Interrupted):
            raise outcome.error
        return outcome

    return execute


def quietly(action: Callable[[], Any]) -> None:
    with contextlib.suppress(Exception):
        action()
