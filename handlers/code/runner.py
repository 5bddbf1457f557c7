"""The hidden-test runner of the `code` handler, run as `python3 -I -c <this source>` in the eval sandbox.

Standalone on purpose (standard library only, nothing from the farm): the sandbox may hold only a bare
interpreter. It reads one JSON request on stdin,

    {"nonce": str, "tests": str, "names": [str], "solution_dir": str, "budget_s": float, "child": str}

runs the test module's source, then calls each named test function, and writes one JSON event per line to
its stdout, each line prefixed by the nonce so that nothing else can pass for a result:

    <nonce> {"collect_error": str}                                       the tests could not be loaded
    <nonce> {"test": str, "ok": bool, "error": str | null, "seconds": float}
    <nonce> {"done": true}

The verdict is not the solution's to give: no solution code runs in this process. The solution is imported
by a child process (`child`, runner_child.py), and `solution` here is a proxy module whose attributes
forward each call to that child over a pipe. Arguments and results cross as data only (tagged JSON; never
pickle, whose loading would run the child's code here); an object that is not data stays in the child and
comes back as a handle. An exception in the child is raised here as the nearest builtin class. This process
makes itself undumpable first, so that the child (same uid) cannot read its memory (the nonce) or reopen
its stdout through /proc; it refuses to run the tests when it cannot.

Loading the tests counts as one more unit of work; each unit gets a fair share of the remaining budget
(unused time rolls over) and is cut by SIGALRM when it overruns, so an endless loop costs one test, not the
whole run: the child is killed and a fresh one imports the solution for the next test (handles to objects
of the killed child then fail). A child that dies, or answers what is not an encoded value, fails the test
that was calling it.
"""

# Annotations stay unevaluated: the sandbox's interpreter may be older than the farm's.
from __future__ import annotations

import builtins
import contextlib
import json
import linecache
import os
import signal
import subprocess
import sys
import time
import traceback
import types
from collections.abc import Callable, Iterator
from typing import Any, NoReturn

TESTS_FILENAME = "<hidden_tests>"
ERROR_CHARS = 400
REPLY_CHARS = 32 * 1024 * 1024
"""The longest reply line read from the child; a longer one fails the call."""
PR_SET_DUMPABLE = 4


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


class SolutionProcessError(Exception):
    """The solution's process died, sent what is not a reply, or raised what is not a builtin exception."""


def make_undumpable() -> None:
    """prctl(PR_SET_DUMPABLE, 0): /proc/<pid>/mem, fd/ and environ of this process become root's only."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "prctl(PR_SET_DUMPABLE, 0) failed")


def _decode(node: Any, child: Child) -> Any:
    """A value the child sent: plain data only (or a handle); anything malformed raises."""
    if not isinstance(node, list) or len(node) != 2 or not isinstance(node[0], str):
        raise SolutionProcessError("the solution's process sent a malformed value")
    tag, body = node
    if tag == "v" and (body is None or isinstance(body, (bool, int, float, str))):
        return body
    if tag == "ref" and isinstance(body, int) and not isinstance(body, bool):
        return Remote(child, ("ref", body), child.generation)
    if tag in ("list*", "tuple*", "set*", "frozenset*") and isinstance(body, list):
        if not all(item is None or type(item) in (bool, int, float, str) for item in body):
            raise SolutionProcessError("the solution's process sent a malformed value")
        tag = tag[:-1]
        return body if tag == "list" else {"tuple": tuple, "set": set, "frozenset": frozenset}[tag](body)
    if tag in ("list", "tuple", "set", "frozenset") and isinstance(body, list):
        items = [_decode(item, child) for item in body]
        return items if tag == "list" else {"tuple": tuple, "set": set, "frozenset": frozenset}[tag](items)
    if tag == "dict" and isinstance(body, list):
        pairs = [
            (_decode(p[0], child), _decode(p[1], child)) for p in body if isinstance(p, list) and len(p) == 2
        ]
        if len(pairs) != len(body):
            raise SolutionProcessError("the solution's process sent a malformed dict")
        return dict(pairs)
    if tag in ("bytes", "bytearray") and isinstance(body, str):
        return bytes.fromhex(body) if tag == "bytes" else bytearray.fromhex(body)
    numbers = isinstance(body, list) and all(type(x) in (int, float) for x in body)
    if tag == "complex" and numbers and len(body) == 2:
        return complex(body[0], body[1])
    raise SolutionProcessError(f"the solution's process sent a value it may not ({tag!r})")


def _encode(value: Any, child: Child) -> list[object]:
    """An argument for the child: plain data, or a handle to one of the current child's own objects."""
    if value is None or type(value) in (bool, int, float, str):
        return ["v", value]
    if isinstance(value, Remote):
        return ["ref", value.handle(child)]
    if type(value) in (list, tuple, set, frozenset):
        if all(item is None or type(item) in (bool, int, float, str) for item in value):
            return [type(value).__name__ + "*", list(value)]
        return [type(value).__name__, [_encode(item, child) for item in value]]
    if type(value) is dict:
        return ["dict", [[_encode(k, child), _encode(v, child)] for k, v in value.items()]]
    if type(value) in (bytes, bytearray):
        return [type(value).__name__, bytes(value).hex()]
    if type(value) is complex:
        return ["complex", [value.real, value.imag]]
    raise TypeError(f"a {type(value).__name__} cannot be passed to the solution (only plain data crosses)")


def _copy_back(original: Any, node: Any, child: Child) -> None:
    """The child's state of a mutable argument after the call, written into the test's own object."""
    if node is None:
        return
    new = _decode(node, child)
    if type(original) is not type(new):
        return
    if type(new) in (list, bytearray):
        original[:] = new
    elif type(new) in (dict, set):
        original.clear()
        original.update(new)


def _raised(info: Any) -> BaseException:
    """The child's exception as one of ours: the same builtin class, or SolutionProcessError."""
    if not isinstance(info, dict):
        return SolutionProcessError("the solution's process sent a malformed exception")
    name, base, message = (str(info.get(key, ""))[:ERROR_CHARS] for key in ("name", "type", "message"))
    cls = getattr(builtins, base, None)
    if isinstance(cls, type) and issubclass(cls, BaseException):
        try:
            exc = cls(message) if message else cls()
            if isinstance(exc, cls):
                return exc
        except Exception:
            pass
    return SolutionProcessError(f"{name}: {message}")


class Child:
    """The solution's process: started on first use, killed when a call overruns or fails, then restarted."""

    def __init__(self, source: str, solution_dir: str) -> None:
        self.source = source
        self.solution_dir = solution_dir
        self.process: subprocess.Popen[str] | None = None
        self.generation = 0

    def _start(self) -> subprocess.Popen[str]:
        """A fresh child with the solution imported; raises what importing it raised."""
        self.generation += 1
        self.process = subprocess.Popen(
            [sys.executable or "python3", "-I", "-c", self.source, self.solution_dir],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            cwd=self.solution_dir,
            text=True,
            encoding="utf-8",
            close_fds=True,
            start_new_session=True,
        )
        reply = self._read(self.process)
        if "raised" in reply:
            raise _raised(reply["raised"])
        if reply.get("ready") is not True:
            raise SolutionProcessError("the solution's process did not start")
        return self.process

    def ask(self, request: dict[str, object]) -> dict[str, Any]:
        """One request and its reply; any failure on the way (an alarm included) kills the child."""
        try:
            process = self.process if self.process and self.process.poll() is None else self._start()
            assert process.stdin is not None
            process.stdin.write(json.dumps(request) + "\n")
            process.stdin.flush()
            return self._read(process)
        except BaseException:
            self.kill()
            raise

    def _read(self, process: subprocess.Popen[str]) -> dict[str, Any]:
        assert process.stdout is not None
        try:
            line = process.stdout.readline(REPLY_CHARS)
            reply = json.loads(line) if line.endswith("\n") else None
        except (OSError, ValueError, RecursionError) as exc:
            raise SolutionProcessError(f"the solution's process failed ({type(exc).__name__})") from None
        if not line:
            raise SolutionProcessError("the solution's process ended")
        if not isinstance(reply, dict):
            raise SolutionProcessError("the solution's process sent what is not a reply")
        return reply

    def value(self, request: dict[str, object], *, args: tuple[Any, ...] = (), kwargs: Any = None) -> Any:
        """The child's answer to `request`, mutated arguments copied back; raises what the child raised."""
        reply = self.ask(request)
        try:
            sent_args, sent_kwargs = reply.get("args"), reply.get("kwargs")
            if isinstance(sent_args, list) and len(sent_args) == len(args):
                for original, node in zip(args, sent_args, strict=True):
                    _copy_back(original, node, self)
            if isinstance(sent_kwargs, dict) and kwargs:
                for key, node in sent_kwargs.items():
                    if key in kwargs:
                        _copy_back(kwargs[key], node, self)
            if "raised" in reply:
                raise _raised(reply["raised"])
            if "value" not in reply:
                raise SolutionProcessError("the solution's process sent a reply without a value")
            return _decode(reply["value"], self)
        except RecursionError:
            raise SolutionProcessError("the solution's process sent a value nested too deep") from None

    def kill(self) -> None:
        process, self.process = self.process, None
        if process is None:
            return
        with contextlib.suppress(OSError):  # the solution's own children too
            os.killpg(process.pid, signal.SIGKILL)
        try:
            process.kill()
            process.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            pass


class Remote:
    """An object of the solution, in the child: calling it or reading its attributes asks the child."""

    __slots__ = ("_address", "_child", "_generation")

    def __init__(self, child: Child, address: tuple[str, object], generation: int) -> None:
        self._child = child
        self._address = address
        self._generation = generation

    def handle(self, child: Child) -> object:
        if self._address[0] == "ref" and self._generation != child.generation:
            raise SolutionProcessError("this object belonged to a solution process that has ended")
        return self._address[1]

    def _target(self) -> list[object]:
        return [self._address[0], self.handle(self._child)]

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        request: dict[str, object] = {
            "op": "call",
            "target": self._target(),
            "args": [_encode(a, self._child) for a in args],
            "kwargs": {str(k): _encode(v, self._child) for k, v in kwargs.items()},
        }
        return self._child.value(request, args=args, kwargs=kwargs)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        if self._address[0] == "name":  # resolved afresh: the child may have been restarted since
            return getattr(self._child.value({"op": "attr", "name": self._address[1]}), name)
        return self._child.value({"op": "getattr", "ref": self.handle(self._child), "name": name})

    def _ref(self) -> object:
        if self._address[0] == "name":
            reference = self._child.value({"op": "attr", "name": self._address[1]})
            return reference._ref() if isinstance(reference, Remote) else None
        return self.handle(self._child)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._child.value({"op": "iterate", "ref": self._ref()}))

    def __len__(self) -> int:
        length = self._child.value({"op": "len", "ref": self._ref()})
        return length if type(length) is int else 0

    def __repr__(self) -> str:
        return f"<object of the solution {self._address[0]}:{self._address[1]}>"


def solution_proxy(child: Child) -> types.ModuleType:
    """The `solution` module the tests import: each attribute lives in the child."""
    module = types.ModuleType("solution")

    def attribute(name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        value = child.value({"op": "attr", "name": name})
        return Remote(child, ("name", name), 0) if isinstance(value, Remote) else value

    module.__getattr__ = attribute  # type: ignore[method-assign]
    return module


def _refusal() -> str | None:
    """Why the tests may not run here (this process cannot be made undumpable), or None."""
    try:
        make_undumpable()
    except Exception as exc:  # no ctypes, no prctl: the child could read the nonce, so nothing is graded
        return f"the runner could not make itself undumpable: {type(exc).__name__}: {exc}"
    return None


def _run_tests(
    module: types.ModuleType, names: list[str], deadline: float, emit: Callable[[dict[str, object]], None]
) -> None:
    for i, name in enumerate(names):
        left = deadline - time.monotonic()
        test = module.__dict__.get(name)
        started = time.monotonic()
        error: str | None
        if left <= 0:
            ok, error = False, "not run: the time budget was spent"
        elif not callable(test):
            ok, error = False, f"{name} is not a function of the tests"
        else:
            ok, error = _run_unit(test, left / (len(names) - i))
        emit({"test": name, "ok": ok, "error": error, "seconds": round(time.monotonic() - started, 4)})


def main() -> None:
    refused = _refusal()  # first: before the nonce is in this process's memory
    request = json.loads(sys.stdin.read())
    nonce = request["nonce"]
    names = list(request["names"])
    source = request["tests"]
    deadline = time.monotonic() + float(request["budget_s"])
    solution_dir = request["solution_dir"]

    results = os.fdopen(os.dup(1), "w", encoding="utf-8")
    dumps = json.dumps

    def emit(event: dict[str, object]) -> None:
        results.write(nonce + " " + dumps(event) + "\n")
        results.flush()

    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)

    sys.dont_write_bytecode = True
    # The tests' own imports come from the standard library, never from the solution's directory.
    here = ("", ".", solution_dir, os.path.realpath(solution_dir), os.environ.get("PWD", ""))
    sys.path[:] = [p for p in sys.path if p not in here]
    child = Child(request["child"], solution_dir)
    sys.modules["solution"] = solution_proxy(child)
    signal.signal(signal.SIGALRM, _on_alarm)
    linecache.cache[TESTS_FILENAME] = (len(source), None, source.splitlines(True), TESTS_FILENAME)
    module = types.ModuleType("hidden_tests")
    module.__file__ = TESTS_FILENAME
    sys.modules["hidden_tests"] = module

    def load() -> None:
        exec(compile(source, TESTS_FILENAME, "exec"), module.__dict__)

    ok, error = (
        (False, refused) if refused else _run_unit(load, (deadline - time.monotonic()) / (len(names) + 1))
    )
    if ok:
        _run_tests(module, names, deadline, emit)
    else:
        emit({"collect_error": error})
    child.kill()
    emit({"done": True})
    results.close()
    os._exit(0)  # threads left running must not keep the process alive


if __name__ == "__main__":
    main()
