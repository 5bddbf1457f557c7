"""The solution's side of the hidden-test runner: a process of its own, started by runner.py as
`python3 -I -c <this source> <solution_dir>`, that imports the solution and serves calls into it.

Standalone on purpose (standard library only), like runner.py. It holds nothing secret: no nonce, no tests.
Whatever it answers is only data (see runner.py for the encoding) that the runner checks on its own side.
One JSON message per line on its original stdin/stdout (moved to private descriptors, the standard ones
pointing at /dev/null so the solution's prints and reads cannot touch the protocol):

    <- {"ready": true} | {"raised": {...}}                      after importing the solution
    -> {"op": "attr", "name": str}                              a module attribute
    -> {"op": "getattr", "ref": int, "name": str}               an attribute of an object of the solution
    -> {"op": "call", "target": ["name", str] | ["ref", int], "args": [...], "kwargs": {...}}
    -> {"op": "iterate", "ref": int} | {"op": "len", "ref": int}
    <- {"value": <encoded>, "args": [...], "kwargs": {...}} | {"raised": {...}, "args": ..., "kwargs": ...}

"args"/"kwargs" carry the arguments' state after a call, so that a test can see a solution mutate them.
"""

from __future__ import annotations

import builtins
import importlib
import json
import os
import sys
from typing import Any

ERROR_CHARS = 400
PR_CAPBSET_DROP = 24
LINUX_CAPABILITY_VERSION_3 = 0x20080522
SCALARS = (type(None), bool, int, float, str)
MUTABLES = (list, dict, set, bytearray)


class Objects:
    """The solution's objects the runner holds handles to, by number."""

    def __init__(self) -> None:
        self.held: list[object] = []

    def ref(self, value: object) -> list[object]:
        self.held.append(value)
        return ["ref", len(self.held) - 1]

    def get(self, number: object) -> object:
        if not isinstance(number, int) or not 0 <= number < len(self.held):
            raise LookupError(f"no object {number!r}")
        return self.held[number]


def encode(value: Any, objects: Objects) -> list[object]:
    """Plain data as tagged JSON; anything else becomes a handle the runner can call or query."""
    if type(value) in SCALARS:
        return ["v", value]
    for kind in (list, tuple, set, frozenset):
        if isinstance(value, kind):
            items = list(value)
            if all(type(item) in SCALARS for item in items):  # the common case, compact: "list*"
                return [kind.__name__ + "*", items]
            return [kind.__name__, [encode(item, objects) for item in items]]
    if isinstance(value, dict):
        return ["dict", [[encode(k, objects), encode(v, objects)] for k, v in value.items()]]
    if isinstance(value, (bytes, bytearray)):
        return [type(value).__name__ if type(value) in (bytes, bytearray) else "bytes", bytes(value).hex()]
    if isinstance(value, complex):
        return ["complex", [value.real, value.imag]]
    for scalar in (bool, int, float, str):  # subclasses of the scalars, as their plain value
        if isinstance(value, scalar):
            return ["v", scalar(value)]
    return objects.ref(value)


def decode(node: Any, objects: Objects) -> Any:
    tag, body = node
    if tag == "v":
        return body
    if tag == "ref":
        return objects.get(body)
    if tag in ("list*", "tuple*", "set*", "frozenset*"):
        tag, items = tag[:-1], list(body)
        return items if tag == "list" else {"tuple": tuple, "set": set, "frozenset": frozenset}[tag](items)
    if tag in ("list", "tuple", "set", "frozenset"):
        items = [decode(item, objects) for item in body]
        return items if tag == "list" else {"tuple": tuple, "set": set, "frozenset": frozenset}[tag](items)
    if tag == "dict":
        return {decode(k, objects): decode(v, objects) for k, v in body}
    if tag in ("bytes", "bytearray"):
        return bytes.fromhex(body) if tag == "bytes" else bytearray.fromhex(body)
    if tag == "complex":
        return complex(*body)
    raise ValueError(f"unknown tag {tag!r}")


def describe(exc: BaseException) -> dict[str, str]:
    """The exception's class, the nearest builtin class it derives from, and its message."""
    base = next(
        (c.__name__ for c in type(exc).__mro__ if getattr(builtins, c.__name__, None) is c), "Exception"
    )
    try:
        message = str(exc)
    except BaseException:
        message = ""
    return {"type": base, "name": type(exc).__name__, "message": message[:ERROR_CHARS]}


def changed(argument: object, sent: object, objects: Objects) -> object:
    """A mutable argument's state after the call when the call changed it, else None."""
    if not isinstance(argument, MUTABLES):
        return None
    after = encode(argument, objects)
    return None if after == sent else after


def serve(request: dict[str, Any], module: object, objects: Objects) -> dict[str, Any]:
    op = request["op"]
    if op == "attr":
        return {"value": encode(getattr(module, request["name"]), objects)}
    if op == "getattr":
        return {"value": encode(getattr(objects.get(request["ref"]), request["name"]), objects)}
    if op == "iterate":
        return {"value": encode(list(objects.get(request["ref"])), objects)}  # type: ignore[call-overload]
    if op == "len":
        return {"value": encode(len(objects.get(request["ref"])), objects)}  # type: ignore[arg-type]
    kind, name = request["target"]
    target = getattr(module, name) if kind == "name" else objects.get(name)
    args = [decode(a, objects) for a in request["args"]]
    kwargs = {k: decode(v, objects) for k, v in request["kwargs"].items()}
    reply: dict[str, Any] = {}
    try:
        reply["value"] = encode(target(*args, **kwargs), objects)  # type: ignore[operator]
    except BaseException as exc:  # the solution's failure, SystemExit included: the runner's to judge
        reply = {"raised": describe(exc)}
    reply["args"] = [changed(a, sent, objects) for a, sent in zip(args, request["args"], strict=True)]
    reply["kwargs"] = {k: changed(v, request["kwargs"][k], objects) for k, v in kwargs.items()}
    return reply


def drop_capabilities() -> None:
    """No capability for the solution (e.g. CAP_SYS_PTRACE, which would let it read the undumpable runner's
    memory when the runner runs as root outside a sandbox), now or after an exec. Raises if any is left."""
    with open("/proc/self/status", encoding="ascii") as status:
        if all(int(line.split()[1], 16) == 0 for line in status if line.startswith(("CapEff", "CapPrm"))):
            return
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    for cap in range(64):
        libc.prctl(PR_CAPBSET_DROP, cap, 0, 0, 0)
    header = (ctypes.c_uint32 * 2)(LINUX_CAPABILITY_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()
    if libc.capset(header, data) != 0:
        raise OSError(ctypes.get_errno(), "capset failed")


def main() -> None:
    incoming = os.fdopen(os.dup(0), "r", encoding="utf-8")
    outgoing = os.fdopen(os.dup(1), "w", encoding="utf-8")
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    sys.dont_write_bytecode = True
    sys.path.insert(0, sys.argv[1])
    objects = Objects()

    def send(message: dict[str, Any]) -> None:
        try:
            text = json.dumps(message)
        except BaseException as exc:  # e.g. a result nested too deep to encode
            text = json.dumps({"raised": describe(exc)})
        outgoing.write(text + "\n")
        outgoing.flush()

    try:
        drop_capabilities()
    except BaseException as exc:
        send({"raised": {"type": "Exception", "name": "RunnerError", "message": f"capabilities: {exc}"}})
        os._exit(0)
    try:
        # The task's module, found on the solution's directory: not a dependency of the farm.
        solution = importlib.import_module("solution")
    except BaseException as exc:
        send({"raised": describe(exc)})
        os._exit(0)
    send({"ready": True})
    for line in incoming:
        try:
            reply = serve(json.loads(line), solution, objects)
        except BaseException as exc:
            reply = {"raised": describe(exc)}
        send(reply)
    os._exit(0)  # threads the solution left running must not keep the process alive


if __name__ == "__main__":
    main()
