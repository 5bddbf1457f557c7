"""What an evaluation re-checks before it trusts a test run with the rollout's work.

A test command exits 0 or prints PASSED because of what it loads. Besides the code under test, Python and
pytest load files implicitly: `conftest.py` and `pytest.ini` beside the tests, `sitecustomize.py`,
`usercustomize.py` and `.pth` files on the import path (the user site lies under $HOME, which is the
workspace), and the shell finds commands on PATH. A rollout can plant any of these, so an evaluation:

- refuses a patch that creates or changes an implicitly loaded file (`refused_patch_paths`);
- compares the implicitly loaded files of a workspace with those it held before the rollout, read inside
  the sandbox without following links (`implicit_files`, `changed_implicit`; `scan_implicit` on a tree
  the caller owns);
- runs its commands with `evaluation_env`: no user site, a fresh $HOME, no BASH_ENV/ENV, and PATH without
  any entry the sandbox can write (the workspace, /tmp);
- before any evaluation step or read of a rollout's workspace, kills everything the rollout left running
  in its sandbox (`Sandbox.quiesce`: the whole pid namespace but the execution server);
- keeps its own inputs off the rollout's paths (`prepare_evaluation`): its $HOME and bytecode cache in a
  directory it makes itself (unpredictable name, O_EXCL), hidden files written at their names inside the
  sandbox without following links, replacing whatever the rollout left there;
- reads a workspace only inside its sandbox, as the sandbox's user: the implicitly loaded files
  (`implicit_files`), a frozen copy for a fresh runtime (`carry_workspace`), never on the host as root;
- tells the rollout's failures from the farm's by construction: a step on a state the farm made (a fresh
  runtime before the rollout's work arrives) failing is the farm's (`EvaluatorUnavailable`); the same
  step failing on the rollout's state is the rollout's (`EvaluationRefused`: reward 0, flagged in
  `metadata.evaluation_refused`);
- counts a sandbox whose execution server was lost after the rollout ran in it as the rollout's doing
  (`sandbox_lost_by_rollout`): scored 0 and flagged, never an infrastructure failure. The rollout's
  commands run as the server's user and can kill it; a trainer leaves infrastructure failures out, so
  otherwise a policy could learn to dodge its zeros by breaking its sandbox.
"""

from __future__ import annotations

import os
import re
import uuid
from pathlib import Path

from containers import Sandbox
from containers.freeze import scan_named
from containers.launch import SANDBOX_WRITABLE_DIRS, beneath

IMPLICIT_NAMES = frozenset(
    {"conftest.py", "sitecustomize.py", "usercustomize.py", "pytest.ini", ".pytest.ini"}
)
IMPLICIT_SUFFIXES = (".pth",)


class EvaluatorUnavailable(RuntimeError):
    """The evaluator cannot run, or cannot run trustworthily, on this worker (e.g. swebench without Docker,
    the farm's interpreter in a directory every sandbox can write): an infrastructure failure, never a 0."""


class EvaluationRefused(Exception):
    """The state the rollout left makes the evaluation impossible (a directory where a hidden test goes,
    permissions removed, /tmp unusable, a tree too deep, a patch that does not apply): the rollout's doing,
    scored 0 with `metadata.evaluation_refused` naming the reason, never an infrastructure failure."""


_DIFF_PATHS = re.compile(r"^(?:diff --git a/(.+?) b/(.+?)|(?:---|\+\+\+) (?:a|b)/(.+?)(?:\t.*)?)$")


def sandbox_lost_by_rollout(exc: Exception) -> str:
    """The flag a job carries when its rollout's sandbox lost its execution server (module docstring)."""
    return (
        f"the sandbox's execution server was lost after the rollout ran in it ({exc}); "
        "counted as the rollout's doing, scored 0"
    )


def is_implicit(path: str) -> bool:
    name = path.rstrip("/").rsplit("/", 1)[-1]
    return name in IMPLICIT_NAMES or name.endswith(IMPLICIT_SUFFIXES)


def refused_patch_paths(patch: str, path_dirs: list[str] | tuple[str, ...] = ()) -> list[str]:
    """Paths of a unified or git diff that tests would load without being asked to (sorted, unique):
    implicitly loaded files, and anything in `path_dirs` (workspace-relative directories on PATH)."""
    found = set()
    dirs = [d.strip("/") + "/" for d in path_dirs if d.strip("/")]
    for line in patch.splitlines():
        match = _DIFF_PATHS.match(line)
        if match:
            for raw in match.groups():
                path = (raw or "").strip('"')
                if path and (is_implicit(path) or any(path.startswith(d) for d in dirs)):
                    found.add(path)
    return sorted(found)


def workspace_path_dirs(path: str, workdir: str) -> list[str]:
    """The PATH entries lying in the workspace, relative to it."""
    prefix = workdir.rstrip("/") + "/"
    return [
        os.path.normpath(e)[len(prefix) :] for e in path.split(":") if os.path.normpath(e).startswith(prefix)
    ]


SCAN_SKIPPED_DIRS = frozenset({".git", "node_modules", "__pycache__", "site-packages", "dist-packages"})
"""Not searched for planted files: installing packages during a run legitimately adds conftest.py and .pth
files there; an evaluation in the rollout's sandbox keeps the workspace off PATH instead."""


def scan_implicit(root: str | Path) -> dict[str, str]:
    """Workspace-relative path → sha256 (or "link:<target>", "special") of every implicitly loaded file
    under `root` (.pth files aside: loaded only from site directories), without following links and
    without recursion (containers/freeze.py). `implicit_files` reads a sandbox's from inside it."""
    return scan_named(str(root), IMPLICIT_NAMES, SCAN_SKIPPED_DIRS)


def implicit_files(sandbox: Sandbox) -> dict[str, str]:
    """`scan_implicit` of the sandbox's workdir, read inside the sandbox by its own user."""
    return sandbox.scan_named(sorted(IMPLICIT_NAMES), sorted(SCAN_SKIPPED_DIRS))


def prepare_evaluation(sandbox: Sandbox, files: dict[str, str], cwd: str | None = None) -> str:
    """The evaluation's own directory in `sandbox` (quiesced first), `files` placed; EvaluationRefused when
    the sandbox's state makes that impossible."""
    answer = sandbox.prepare_evaluation(files, cwd)
    if answer.get("refused"):
        raise EvaluationRefused(str(answer["refused"]))
    return str(answer["dir"])


def carry_workspace(source: Sandbox, target: Sandbox) -> list[str]:
    """The source's workdir, frozen inside it (quiesced first) and unpacked in the target's workdir; the
    host only forwards the bytes. Returns the entries left out (special files, links leading out);
    EvaluationRefused when the workspace cannot be carried (too large, too deep, unreadable)."""
    frozen = source.freeze()
    if frozen.get("refused"):
        raise EvaluationRefused(f"the workspace cannot be carried to the fresh runtime: {frozen['refused']}")
    thawed = target.thaw(frozen["data"])
    if thawed.get("refused"):
        raise EvaluationRefused(str(thawed["refused"]))
    return [*frozen.get("skipped", []), *thawed.get("left_out", [])]


def changed_implicit(before: dict[str, str], after: dict[str, str]) -> list[str]:
    """Implicitly loaded files added, removed or changed between two scans."""
    return sorted(p for p in set(before) | set(after) if before.get(p) != after.get(p))


def command_path(sandbox: Sandbox) -> str:
    """The PATH the sandbox's commands start with: its execution server's, which the rollout cannot
    change (read with the sandbox's read-only printenv)."""
    return sandbox.exec(["/usr/bin/printenv", "PATH"], timeout=30).stdout.strip()


def evaluation_env(
    sandbox: Sandbox, *, rollout_sandbox: bool, evaluation_dir: str | None = None
) -> dict[str, str]:
    """Variables an evaluation command runs with in `sandbox`: a fresh private $HOME, no user site, no shell
    start-up file, and PATH less what the sandbox can write. In a fresh sandbox the workspace's own PATH
    entries (a venv the task prepared) stay, the patch having been screened for them; in the rollout's
    sandbox they go. With `evaluation_dir` (`prepare_evaluation`'s), $HOME and Python's bytecode cache
    (PYTHONPYCACHEPREFIX: no `__pycache__` the rollout planted is read) are in it."""
    extra: dict[str, str] = {}
    if evaluation_dir is not None:
        home = f"{evaluation_dir}/home"
        extra["PYTHONPYCACHEPREFIX"] = f"{evaluation_dir}/pycache"
    else:
        home = f"/tmp/.farm-eval-{uuid.uuid4().hex}"
        made = sandbox.exec(["/bin/mkdir", "-m", "700", home], timeout=30)
        if made.exit_code != 0:
            raise RuntimeError(f"could not make the evaluation's home {home}: {made.stderr.strip()[:300]}")
    path = command_path(sandbox)
    if untrusted := _host_entries_in_writable_dirs(path, sandbox.workdir):
        # The farm put these on PATH (the execution server's PATH is the host's), e.g. a venv under /tmp.
        # Dropping them would run the tests without the interpreter they need and score a policy 0 for it;
        # keeping them would run whatever the rollout planted there.
        raise EvaluatorUnavailable(
            f"the sandbox's PATH holds {', '.join(untrusted)}, in a directory every sandbox can write "
            f"({', '.join(SANDBOX_WRITABLE_DIRS)}): an evaluation can neither trust it nor run without it. "
            "Install the farm's Python (its venv) outside those directories, or drop the entry from the "
            "runtime's env."
        )
    return {
        "PATH": trusted_path(path, sandbox.workdir if rollout_sandbox else None),
        "HOME": home,
        "PYTHONNOUSERSITE": "1",
        "BASH_ENV": "",
        "ENV": "",
        **extra,
    }


def _host_entries_in_writable_dirs(path: str, workdir: str) -> list[str]:
    """PATH entries under a sandbox-writable directory other than the workspace (whose entries a task's
    own venv may hold, screened or dropped by `trusted_path`)."""
    return [
        entry
        for entry in dict.fromkeys(os.path.normpath(e) for e in path.split(":") if e.startswith("/"))
        if _under(entry, SANDBOX_WRITABLE_DIRS) and not _under(entry, (workdir,))
    ]


def _under(path: str, parents: tuple[str, ...]) -> bool:
    return any(beneath(path, p) for p in parents)


def trusted_path(path: str, workdir: str | None) -> str:
    """`path` without relative entries and entries under a sandbox-writable directory (and the workspace,
    when `workdir` is given)."""
    kept = []
    writable = (*SANDBOX_WRITABLE_DIRS, *([workdir] if workdir else []))
    for entry in path.split(":"):
        normal = os.path.normpath(entry) if entry else ""
        if not normal.startswith("/"):
            continue
        if _under(normal, writable):
            continue
        kept.append(normal)
    return ":".join(dict.fromkeys(kept)) or "/usr/bin:/bin"
