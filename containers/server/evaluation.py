"""The execution server's evaluation ops: what an evaluation does inside a sandbox, as the sandbox's user,
before it trusts anything of the rollout's (handlers/evaluation_guard.py drives them).

- `stop_others`: SIGKILL every process of the sandbox's pid namespace but this server and the namespace's
  init, again until none is left alive (a fork racing the first signal needs another);
- `evaluation_dir`: a directory of the evaluation's own (`mkdtemp`: an unpredictable name made with
  O_EXCL semantics, mode 700) holding its $HOME and bytecode cache; the rollout, stopped, never saw it;
- `place_files`: the evaluation's files (hidden tests) written at their names under the workdir without
  following any link: each directory opened with O_NOFOLLOW under its parent's fd, whatever the rollout
  left at the file's name (a link, fifo, file) removed, the file created O_EXCL|O_NOFOLLOW. A directory at
  the name, or a link / non-directory where a parent directory should be, refuses the evaluation;
- `check_dir`: whether a directory (the workdir, the command's cwd) can be entered and read.

A refusal is returned as data (`{"refused": why}`): the rollout's state made the evaluation impossible.
Exceptions are the server's own failures.
"""

from __future__ import annotations

import contextlib
import os
import signal
import stat
import tempfile
import time

TYPE_CHECKING = False  # the server avoids importing typing at start-up
if TYPE_CHECKING:
    from typing import Any

EVALUATION_PARENT = "/tmp"
_STOP_WITHIN_S = 3.0


def live_others(own: int) -> list[int]:
    """Pids of the namespace's processes of this user that are alive (zombies aside), but `own` and init
    (pid 1): what kill(-1) reaches. Another user's (an image's own service) is not the rollout's."""
    found = []
    uid = os.getuid()
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in (1, own):
            continue
        try:
            with open(f"/proc/{name}/status", "rb") as handle:
                status = dict(line.split(b":", 1) for line in handle.read().splitlines() if b":" in line)
            state, real_uid = status[b"State"].split()[0], int(status[b"Uid"].split()[0])
        except (OSError, KeyError, IndexError, ValueError):
            continue  # exited meanwhile
        if real_uid == uid and state not in (b"Z", b"X"):
            found.append(int(name))
    return found


def stop_others(within: float = _STOP_WITHIN_S) -> dict[str, Any]:
    """kill(-1) reaches exactly the processes of this pid namespace this user may signal: all of the
    rollout's, which runs as this server's user."""
    own = os.getpid()
    deadline = time.monotonic() + within
    rounds = 0
    while True:
        rounds += 1
        with contextlib.suppress(ProcessLookupError):
            os.kill(-1, signal.SIGKILL)
        left = live_others(own)
        if not left:
            return {"rounds": rounds, "left": []}
        if time.monotonic() >= deadline:
            return {"rounds": rounds, "left": left}
        time.sleep(0.01)


def evaluation_dir(parent: str = EVALUATION_PARENT) -> dict[str, Any]:
    try:
        path = tempfile.mkdtemp(prefix=".farm-eval-", dir=parent)
        for sub in ("home", "pycache"):
            os.mkdir(os.path.join(path, sub), 0o700)
    except OSError as exc:
        return {"refused": f"the evaluation cannot make its directory in {parent}: {exc.strerror}"}
    return {"dir": path}


def check_dir(path: str) -> dict[str, Any]:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as exc:
        return {"refused": f"{path} cannot be opened as a directory: {exc.strerror}"}
    try:
        os.listdir(fd)
    except OSError as exc:
        return {"refused": f"{path} cannot be read: {exc.strerror}"}
    finally:
        os.close(fd)
    if not os.access(path, os.X_OK, follow_symlinks=False):
        return {"refused": f"{path} cannot be entered"}
    return {}


def place_files(workdir: str, files: dict[str, str]) -> dict[str, Any]:
    placed: list[str] = []
    for rel, content in files.items():
        problem = _place(workdir, rel, content.encode())
        if problem:
            return {"refused": problem, "placed": placed}
        placed.append(rel)
    return {"placed": placed}


def _place(workdir: str, rel: str, data: bytes) -> str | None:
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if not parts or ".." in parts or rel.startswith("/"):
        raise ValueError(f"not a relative path inside the workdir: {rel!r}")
    try:
        fd = os.open(workdir, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError as exc:
        return f"the workdir cannot be opened: {exc.strerror}"
    try:
        for depth, part in enumerate(parts[:-1]):
            where = "/".join(parts[: depth + 1])
            try:
                os.mkdir(part, 0o755, dir_fd=fd)
            except FileExistsError:
                pass
            except OSError as exc:
                return f"cannot make the directory {where}: {exc.strerror}"
            try:
                child = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=fd)
            except OSError as exc:
                return (
                    f"{where} is not a directory the evaluation may enter (a link, a file?): {exc.strerror}"
                )
            os.close(fd)
            fd = child
        name = parts[-1]
        try:
            info = os.stat(name, dir_fd=fd, follow_symlinks=False)
        except FileNotFoundError:
            info = None
        except OSError as exc:
            return f"cannot look at {rel}: {exc.strerror}"
        if info is not None:
            if stat.S_ISDIR(info.st_mode):
                return f"{rel} is a directory the rollout left where the evaluation's file goes"
            try:
                os.unlink(name, dir_fd=fd)  # a link, fifo or file of the rollout's: never written through
            except OSError as exc:
                return f"cannot replace what the rollout left at {rel}: {exc.strerror}"
        try:
            out = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=fd)
        except OSError as exc:
            return f"cannot create {rel}: {exc.strerror}"
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(out, view) :]
        except OSError as exc:
            return f"cannot write {rel}: {exc.strerror}"
        finally:
            os.close(out)
        return None
    finally:
        os.close(fd)
