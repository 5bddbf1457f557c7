"""A real local Redis Cluster for tests: three `redis-server --cluster-enabled yes` masters on free
loopback ports, joined by `redis-cli --cluster create`. Never the machine's own Redis."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import redis

MASTERS = 3


def _free_port() -> int:
    """A free port whose cluster bus port (port + 10000) is free as well."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = int(s.getsockname()[1])
        if port + 10000 >= 65536:
            continue
        with socket.socket() as bus:
            try:
                bus.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port


def missing_binaries() -> str | None:
    for binary in ("redis-server", "redis-cli"):
        if shutil.which(binary) is None:
            return f"{binary} is not on PATH"
    return None


class LocalCluster:
    def __init__(self) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="farm-cluster-"))
        self.ports: list[int] = []
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, timeout_s: float = 20.0) -> LocalCluster:
        for _ in range(MASTERS):
            port = _free_port()
            self.ports.append(port)
            argv = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--cluster-enabled", "yes"]
            argv += ["--cluster-config-file", f"nodes-{port}.conf", "--dir", str(self.dir)]
            argv += ["--save", "", "--appendonly", "no"]
            self.procs.append(subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        deadline = time.monotonic() + timeout_s
        for port in self.ports:
            self._wait(lambda p=port: redis.Redis(port=p).ping(), deadline)
        create = ["redis-cli", "--cluster", "create", *(f"127.0.0.1:{p}" for p in self.ports)]
        subprocess.run([*create, "--cluster-replicas", "0", "--cluster-yes"], check=True, capture_output=True)
        for port in self.ports:
            self._wait(lambda p=port: redis.Redis(port=p).cluster("info")["cluster_state"] == "ok", deadline)
        return self

    @staticmethod
    def _wait(ready: object, deadline: float) -> None:
        while True:
            try:
                if ready():  # type: ignore[operator]
                    return
            except (redis.ConnectionError, KeyError):
                pass
            if time.monotonic() > deadline:
                raise TimeoutError("the local Redis Cluster did not come up")
            time.sleep(0.05)

    def client(self) -> redis.RedisCluster:
        return redis.RedisCluster(host="127.0.0.1", port=self.ports[0], decode_responses=True)

    def stop(self) -> None:
        for proc in self.procs:
            proc.terminate()
        for proc in self.procs:
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)
