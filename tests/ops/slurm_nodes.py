"""The ops/slurm node scripts started for real on this machine, as srun would start them on three nodes
(head.sh, cpu-node.sh, gpu-node.sh), with an inference engine stand-in on FARM_LLM_VENV: what the
Slurm checks of both engines (vLLM, SGLang) run against."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

import httpx
import psutil

from farm.embedded_redis import free_port, redis_server_binary
from tests.ops.conftest import OPS
from tests.waiting import wait_until

SLURM = OPS / "slurm"
T = TypeVar("T")

TAKE_HOST_PORT = """host=127.0.0.1
while (($#)); do
    case "$1" in
    --host) host="$2"; shift 2 ;;
    --port) port="$2"; shift 2 ;;
    *) shift ;;
    esac
done"""
"""Bash setting `host` and `port` from an engine's `--host H --port P` (`port`: a default set before)."""


def eventually(probe: Callable[[], T], timeout_s: float, what: str) -> T:
    return wait_until(probe, timeout_s, what=what, interval_s=0.1, ignore=(httpx.HTTPError,))


def two_free_ports() -> int:
    while True:
        port = free_port()
        if port < 65535 and free_port_at(port + 1):
            return port


def free_port_at(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


@dataclass
class Nodes:
    env: dict[str, str]
    shared: Path
    api_url: str
    flower_url: str
    llm_bin: Path
    scripts: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def start(self, name: str, script: str, **extra: str) -> None:
        log = open(self.shared / f"{name}.out", "ab")  # noqa: SIM115 (owned by the child)
        self.scripts[name] = subprocess.Popen(
            [str(SLURM / script)],
            env={**self.env, "SLURMD_NODENAME": name, **extra},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def descendants(self) -> list[psutil.Process]:
        found = []
        for proc in self.scripts.values():
            with contextlib.suppress(psutil.NoSuchProcess):
                found += psutil.Process(proc.pid).children(recursive=True)
        return found

    def kill_all(self) -> None:
        for proc in self.descendants():
            proc.kill()
        for proc in self.scripts.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)


def status(nodes: Nodes) -> dict:
    return httpx.get(f"{nodes.api_url}/status", timeout=5).raise_for_status().json()


@contextlib.contextmanager
def three_nodes(
    shared: Path,
    engine: tuple[str, str],
    *,
    cpu: dict[str, str],
    gpu: dict[str, str],
) -> Iterator[Nodes]:
    """head-0, then cpu-a (with `cpu`'s settings) and gpu-a (two servers on GPUs 0,1, with `gpu`'s
    settings) once the head has written head.env; every process killed on the way out. `engine` is the
    stand-in's file name in the venv's bin/ and its bash source, with `{python}` for this interpreter and
    `{take_host_port}` for TAKE_HOST_PORT."""
    llm_bin = shared / "llm-venv" / "bin"
    llm_bin.mkdir(parents=True)
    name, source = engine
    (llm_bin / name).write_text(source.format(python=sys.executable, take_host_port=TAKE_HOST_PORT))
    (llm_bin / name).chmod(0o755)
    api_port, flower_port = free_port(), free_port()
    path = os.pathsep.join(
        [str(Path(sys.executable).parent), str(Path(redis_server_binary()).parent), os.environ["PATH"]]
    )
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith(("FARM_", "SLURM", "CUDA_"))},
        "PATH": path,
        "FARM_OPS_DIR": str(SLURM),
        "FARM_SHARED_DIR": str(shared),
        "FARM_BIND_HOST": "127.0.0.1",
        "FARM_HEAD_HOST": "127.0.0.1",
        "FARM_LLM_HOST": "127.0.0.1",
        "FARM_REDIS_PORT": str(free_port()),
        "FARM_REDIS_DIR": str(shared / "redis"),
        "FARM_API_PORT": str(api_port),
        "FARM_FLOWER_PORT": str(flower_port),
        "FARM_STOP_GRACE_S": "20",
        "FARM_HEAD_WAIT_S": "90",
        "FARM_WORKDIR": str(shared / "work"),
    }
    farm = Nodes(env, shared, f"http://127.0.0.1:{api_port}", f"http://127.0.0.1:{flower_port}", llm_bin)
    try:
        farm.start("head-0", "head.sh")
        eventually(lambda: (shared / "head.env").exists(), 90, "no head.env")
        farm.start("cpu-a", "cpu-node.sh", FARM_NODE_QUEUES="init,run,eval", **cpu)
        farm.start(
            "gpu-a",
            "gpu-node.sh",
            FARM_LLM_VENV=str(llm_bin.parent),
            FARM_LLM_PORT=str(two_free_ports()),
            FARM_LLM_READY_WAIT_S="90",
            CUDA_VISIBLE_DEVICES="0,1",
            FARM_LLM_TP="1",
            **gpu,
        )
        yield farm
    finally:
        farm.kill_all()
