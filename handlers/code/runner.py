"""The hidden-test runner of the `code` handler, run as `python3 -I -c <this source>` in the eval sandbox.

Standalone on purpose (standard library only, nothing from the farm): the sandbox may hold only a bare
interpreter. It reads one JSON request on stdin,

    {"nonce": str, "tests": str, "names": [str], "solution_dir": str, "budget_s": float}

runs the test module's source (which imports the solution module from `solution_dir`), then calls each
named test function, and writes one JSON event per line to the original stdout, each line prefixed by
the nonce so that nothing the solution prints can pass for a result:

    <nonce> {"collect_error": str}                                       the tests could not be loaded
    <nonce> {"test": str, "ok": bool, "error": str | null, "seconds": float}
    <nonce> {"done": true}

The solution's own output goes to /dev/null. Loading the tests counts as one more unit of work; each unit
gets a fair share of the remaining budget (unused time rolls over) and is cut by SIGALRM when it overruns,
so an endless loop costs one test, not the whole run. What SIGALRM cannot stop (a loop in C code, a
solution swallowing the alarm) is left to the caller's timeout on the whole process.
"""

# Annotations stay unevaluated: the sandbox's interpreter may be older than the farm's.
from __future__ import annotations

import json
import linecache
import os
import signal
import sys
import time
import traceback
import types
from collections.abc import Callable
from typing import NoReturn

TESTS_FILENAME = "<hidden_tests>"
ERROR_CHARS = 400


class _Overrun(BaseException):
    """Raised by the alarm; a BaseException so that `except Exception` in a solution does not eat it."""


def _on_alarm(signum: int, frame: types.FrameType | None) -> NoReturn:
    raise _Overrun()


def _describe(exc: BaseException) -> str:
    """One line about a failure: the exception, and for a bare assert the asserting line of the tests."""
    try:
        text = f"{type(exc).__name__}: {exc}".rstrip(": ")
    except BaseException:
        text = type(exc).__name__
    if isinstance(exc, AssertionError):
        for frame in reversed(traceback.extract_tb(exc.__traceback__)):
            if frame.filename == TESTS_FILENAME:
                text += f" (line {frame.lineno}: {(frame.line or '').strip()})"
                break
    return text[:ERROR_CHARS]


def _attempt(call: Callable[[], object], seconds: float) -> tuple[bool, str | None]:
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 0.01))
    try:
        call()
        return True, None
    except _Overrun:
        raise
    except BaseException as exc:  # SystemExit, KeyboardInterrupt and all: a test failure, never our end
        return False, _describe(exc)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)


def _run_unit(call: Callable[[], object], seconds: float) -> tuple[bool, str | None]:
    """(ok, error) of calling `call` with an alarm after `seconds`."""
    try:
        return _attempt(call, seconds)
    except _Overrun:  # also when the alarm fires just as the call returns
        return False, f"timed out after {seconds:.1f} s"


def main() -> None:
    request = json.loads(sys.stdin.read())
    nonce = request["nonce"]
    names = list(request["names"])
    source = request["tests"]
    deadline = time.monotonic() + float(request["budget_s"])

    results = os.fdopen(os.dup(1), "w", encoding="utf-8")
    dumps = json.dumps

    def emit(event: dict[str, object]) -> None:
        results.write(nonce + " " + dumps(event) + "\n")
        results.flush()

    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)

    sys.dont_write_bytecode = True
    sys.path.insert(0, request["solution_dir"])
    signal.signal(signal.SIGALRM, _on_alarm)
    linecache.cache[TESTS_FILENAME] = (len(source), None, source.splitlines(True), TESTS_FILENAME)
    module = types.ModuleType("hidden_tests")
    module.__file__ = TESTS_FILENAME
    sys.modules["hidden_tests"] = module

    def load() -> None:
        exec(compile(source, TESTS_FILENAME, "exec"), module.__dict__)

    ok, error = _run_unit(load, (deadline - time.monotonic()) / (len(names) + 1))
    if not ok:
        emit({"collect_error": error})
    else:
        for i, name in enumerate(names):
            left = deadline - time.monotonic()
            test = module.__dict__.get(name)
            started = time.monotonic()
            if left <= 0:
                ok, error = False, "not run: the time budget was spent"
            elif not callable(test):
                ok, error = False, f"{name} is not a function of the tests"
            else:
                ok, error = _run_unit(test, left / (len(names) - i))
            emit({"test": name, "ok": ok, "error": error, "seconds": round(time.monotonic() - started, 4)})
    emit({"done": True})
    results.close()
    os._exit(0)  # threads the solution left running must not keep the process alive


if __name__ == "__main__":
    main()
