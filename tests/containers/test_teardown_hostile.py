"""Teardown finishes whatever the rollout left in its workspace: a tree deeper than any recursion, trees
with their permissions removed, read-only directories, links to host paths (never followed), fifos and
sockets (never opened). Each beside its control. And a directory that cannot be removed is said once,
with its cause, not by every orphan sweep forever."""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from containers import workspace_fs
from containers.local import TEARDOWN_FAILED, LocalRuntime
from containers.removal import RemovalError, remove_tree
from containers.spec import SandboxSpec
from farm.identity import FARM_LABEL, current_farm_id
from farm.jobs.store import JobStore
from tasks.orphans import sweep_orphan_sandboxes

from .test_unprivileged import NOBODY, SYSTEM_PYTHON

SETPRIV_NOBODY = ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups"]

# 1,200 nested directories, made without a fork per level; with NO_MODES, each then made mode 000 from
# the deepest up (a mode 000 directory cannot be entered to change what lies below it)
DEEP = (
    "python3 -c \"import os\nfor _ in range(1200): os.mkdir('d'); os.chdir('d')\n"
    "open('leaf', 'w').write('deep')\""
)
NO_MODES = (
    "python3 -c \"import os\nfor _ in range(1200): os.chdir('d')\n"
    "for _ in range(1200): os.chdir('..'); os.chmod('d', 0)\""
)
HOSTILE = {
    "deep": DEEP,
    "deep_no_permissions": f"{DEEP} && {NO_MODES}",
    "read_only_dirs": "mkdir -p ro/a && touch ro/a/f ro/g && chmod 555 ro/a ro && chmod 000 ro/g",
    "links_fifos_sockets": (
        "ln -s {host} host_dir && ln -s {host}/canary host_file && mkfifo pipe && "
        "python3 -c \"import socket; socket.socket(socket.AF_UNIX).bind('sock')\" && "
        "mkdir x && ln -s .. x/up && chmod 000 x"
    ),
    "workspace_mode_000": "mkdir -p a/b && touch a/b/c && chmod 000 a/b a {workdir}",
}


SLOW = {"deep", "deep_no_permissions"}  # 1,200 rmdirs: seconds on a loaded disk


@pytest.mark.parametrize(
    "case", ["control", *(pytest.param(c, marks=[pytest.mark.slow] if c in SLOW else []) for c in HOSTILE)]
)
def test_teardown_removes_whatever_the_workspace_holds(
    runtime: LocalRuntime, tmp_path: Path, case: str
) -> None:
    host = tmp_path / "host"  # a host directory a link points at: must survive untouched
    host.mkdir()
    (host / "canary").write_text("keep")
    os.chmod(tmp_path, 0o755)
    host.chmod(0o755)
    sandbox = runtime.start(SandboxSpec())
    directory = Path(sandbox.info.sandbox_dir)
    command = HOSTILE.get(case, "echo plain > f").format(host=host, workdir=sandbox.info.workdir)
    assert sandbox.exec(command, timeout=120).exit_code == 0
    started = time.monotonic()
    sandbox.stop()
    assert not directory.exists(), case
    assert time.monotonic() - started < 60
    assert (host / "canary").read_text() == "keep"


@pytest.mark.slow
def test_removal_walks_deeper_than_path_max_without_recursion(tmp_path: Path) -> None:
    top = tmp_path / "tree"
    top.mkdir()
    fd = os.open(top, os.O_RDONLY)
    for _ in range(1100):  # 1,100 levels of 100-character names: 110 KB of path, past PATH_MAX
        os.mkdir("n" * 100, dir_fd=fd)
        os.symlink("/", "root", dir_fd=fd)
        child = os.open("n" * 100, os.O_RDONLY, dir_fd=fd)
        os.close(fd)
        fd = child
    os.close(fd)
    with pytest.raises(RecursionError):  # the control: what teardown used before
        shutil.rmtree(top, ignore_errors=True)
    remove_tree(str(top))
    assert not top.exists()


@pytest.fixture
def shared_tmp() -> Iterator[Path]:
    """A directory uid 65534 can reach (pytest's own are root's, mode 700)."""
    made = Path(tempfile.mkdtemp(prefix="farm-removal-"))
    made.chmod(0o755)
    yield made
    remove_tree(str(made))


def test_removal_as_an_unprivileged_owner_restores_the_modes_it_needs(shared_tmp: Path) -> None:
    """An unprivileged farm owns what its sandboxes wrote, but `chmod 000` stops it as it stops anyone."""
    if os.geteuid() != 0 or shutil.which("setpriv") is None or not os.access(SYSTEM_PYTHON, os.X_OK):
        pytest.skip("runs the removal as uid 65534 through setpriv: root with a system python3")
    tmp_path = shared_tmp
    os.chown(tmp_path, NOBODY, NOBODY)  # like the sandboxes root of a farm run as that user
    shutil.copy2(Path(__file__).resolve().parents[2] / "containers" / "removal.py", tmp_path / "removal.py")
    tree = tmp_path / "owned"
    tree.mkdir()
    os.chown(tree, NOBODY, NOBODY)
    script = (
        "import os, subprocess, sys; sys.path.insert(0, sys.argv[1]); from removal import remove_tree\n"
        "t = sys.argv[2]; os.makedirs(t + '/a/b/c', exist_ok=True); open(t + '/a/b/c/f', 'w').close()\n"
        "os.mkfifo(t + '/a/p'); os.symlink('/etc', t + '/a/etc')\n"
        "for d in ('/a/b/c', '/a/b', '/a'): os.chmod(t + d, 0)\n"
        "if sys.argv[3] == 'plain':\n"
        "    import shutil; shutil.rmtree(t, ignore_errors=True)\n"
        "else:\n"
        "    remove_tree(t)\n"
        "print(os.path.exists(t))\n"
    )
    results = {}
    for how in ("plain", "remove_tree"):
        run = subprocess.run(
            [*SETPRIV_NOBODY, SYSTEM_PYTHON, "-c", script, str(tmp_path), str(tree), how],
            capture_output=True,
            text=True,
            timeout=30,
            cwd="/",
        )
        assert run.returncode == 0, run.stderr
        results[how] = run.stdout.strip()
        if tree.exists():
            remove_tree(str(tree))
            tree.mkdir()
            os.chown(tree, NOBODY, NOBODY)
    assert results == {"plain": "True", "remove_tree": "False"}  # the control stays; the removal finishes


def test_a_failed_removal_names_its_entry_and_cause(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("holds a directory with a mount: root only")
    busy = tmp_path / "tree" / "a" / "busy"
    busy.mkdir(parents=True)
    (tmp_path / "tree" / "a" / "f").write_text("x")
    subprocess.run(["mount", "-t", "tmpfs", "none", str(busy)], check=True)
    try:
        with pytest.raises(RemovalError, match=r"could not remove .*/a/busy: Device or resource busy"):
            remove_tree(str(tmp_path / "tree"))
        assert not (tmp_path / "tree" / "a" / "f").exists()  # what could be removed was
    finally:
        subprocess.run(["umount", "-l", str(busy)], check=True)


def test_the_orphan_sweep_says_a_failed_removal_once(
    redis_client: redis.Redis, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    if os.geteuid() != 0:
        pytest.skip("holds a sandbox directory with a mount: root only")
    root = tmp_path / "sandboxes"
    runtime = LocalRuntime(root)
    sandbox = runtime.start(
        SandboxSpec(
            die_with_parent=False, ttl_s=60, labels={"job_id": "gone-job", FARM_LABEL: current_farm_id()}
        )
    )
    directory = Path(sandbox.info.sandbox_dir)
    busy = directory / "busy"
    busy.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "none", str(busy)], check=True)
    store = JobStore(redis_client, 60)
    # a workspace on its own filesystem is retired (moved aside, removed in the background)
    retired = root / workspace_fs.RETIRED / directory.name
    try:
        with caplog.at_level(logging.WARNING):
            for _ in range(3):
                sweep_orphan_sandboxes(store, root=root, grace_s=0)
                workspace_fs.drain()
            where = retired if retired.exists() else directory
            os.utime(where, (0, 0))  # as if retired long ago: the sweep would take it up again
            sweep_orphan_sandboxes(store, root=root, grace_s=0)
            workspace_fs.drain()
        said = [r.getMessage() for r in caplog.records if "left on disk" in r.getMessage()]
        assert len(said) == 1 and "busy: Device or resource busy" in said[0]
        assert not any(r.exc_info for r in caplog.records)
        assert json.loads((where / TEARDOWN_FAILED).read_text())["cause"] in said[0]
        assert not sandbox.ping()  # its processes are gone all the same
    finally:
        subprocess.run(["umount", "-l", str(where / "busy")], check=True)
    # once the cause is gone, the next retry (hourly; forced here) removes it
    failure = json.loads((where / TEARDOWN_FAILED).read_text())
    (where / TEARDOWN_FAILED).write_text(json.dumps({**failure, "at": 0}))
    sweep_orphan_sandboxes(store, root=root, grace_s=0)
    workspace_fs.drain()
    assert not directory.exists() and not retired.exists()
