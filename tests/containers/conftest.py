"""Fixtures for the sandbox tests: a local (bubblewrap) runtime rooted in a private directory."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from containers.bwrap import find_bwrap
from containers.local import LocalRuntime
from containers.sandbox import Sandbox
from containers.spec import SandboxSpec

requires_bwrap = pytest.mark.skipif(find_bwrap() is None, reason="bubblewrap is not installed")


def sandbox_processes(root: Path) -> list[int]:
    """Host pids whose command line mentions the sandboxes root (launchers and servers)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if str(root).encode() in cmdline:
            found.append(int(entry.name))
    return found


def namespace_processes(pidns: str) -> list[Path]:
    """The /proc entries of the processes in one pid namespace (`readlink /proc/<pid>/ns/pid`): a
    sandbox's own processes, whatever else runs on the machine."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            if os.readlink(proc / "ns" / "pid") == pidns:
                found.append(proc)
        except OSError:
            continue
    return found


@pytest.fixture(scope="session")
def sandbox_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("sandboxes")


@pytest.fixture(scope="session")
def runtime(sandbox_root: Path) -> LocalRuntime:
    if find_bwrap() is None:
        pytest.skip("bubblewrap is not installed")
    return LocalRuntime(root=sandbox_root)


@pytest.fixture(scope="module")
def sandbox(runtime: LocalRuntime) -> Iterator[Sandbox]:
    with runtime.start(SandboxSpec()) as started:
        yield started
