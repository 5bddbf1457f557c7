"""Starting a whole local farm as child processes: Redis (if none answers), the API, one Celery
worker per stage queue and the reference LLM server. Used by `farm up`, `farm demo` and the
integration tests, so all three run the farm the same way.

Every child gets its own process group; stopping sends SIGTERM to each group, waits, then SIGKILLs
what is left, so Ctrl-C or the end of a demo leaves no process behind.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from farm.embedded_redis import EmbeddedRedis, free_port
from farm.redis_clients import redis_answers, redis_client
from farm.settings import DEFAULT_REDIS_URL, DEFAULT_SENTINEL_MASTER, Settings
from farm.workers import live_workers

log = logging.getLogger(__name__)


@dataclass
class WorkerSpec:
    queues: str
    """Comma-separated queues, e.g. `init` or `init,eval`."""
    pool: str = "threads"
    concurrency: int = 4
    node: str | None = None
    name: str | None = None
    app: str = "farm"
    """The Celery app module (`celery -A <app>`); benches use one that adds baseline tasks."""


def default_workers(run_concurrency: int = 16) -> list[WorkerSpec]:
    return [
        WorkerSpec("init", concurrency=4),
        WorkerSpec("run", concurrency=run_concurrency),
        WorkerSpec("eval", concurrency=4),
    ]


@dataclass
class LocalFarm:
    redis_url: str = DEFAULT_REDIS_URL
    api_port: int = 0
    workers: list[WorkerSpec] = field(default_factory=default_workers)
    llm_policy: str | None = "scripted"
    """Start the reference LLM server with this policy and register it; None starts none."""
    llm_args: list[str] = field(default_factory=list)
    llm_servers: int = 1
    env: dict[str, str] = field(default_factory=dict)
    log_dir: Path | None = None
    quiet: bool = True
    supervise: bool = False
    """Restart a worker that exits on its own (as systemd's Restart=always would): a Celery worker can
    die on a broker connection error (a kombu bug seen when Redis restarts)."""

    _redis: EmbeddedRedis | None = None
    _children: list[tuple[str, subprocess.Popen[bytes]]] = field(default_factory=list)
    _commands: dict[str, tuple[list[str], dict[str, str]]] = field(default_factory=dict)
    llm_urls: list[str] = field(default_factory=list)
    restarts: int = 0
    _watch_stop: threading.Event = field(default_factory=threading.Event)

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    def child_env(self, **extra: str) -> dict[str, str]:
        env = {**os.environ, "FARM_GATEWAY_URL": f"{self.api_url}/gateway", **self.env}
        env = {**env, "FARM_REDIS_URL": self.redis_url, **extra}
        env.setdefault("PYTHONUNBUFFERED", "1")
        return env

    def redis_settings(self) -> Settings:
        """How this process reaches the farm's Redis: the URL and Sentinel settings its children get."""
        env = self.child_env()
        return Settings(
            redis_url=self.redis_url,
            redis_sentinel_master=env.get("FARM_REDIS_SENTINEL_MASTER") or DEFAULT_SENTINEL_MASTER,
            redis_sentinel_password=env.get("FARM_REDIS_SENTINEL_PASSWORD") or None,
        )

    def _spawn(self, name: str, argv: list[str], **env: str) -> subprocess.Popen[bytes]:
        out: int | object = subprocess.DEVNULL
        if self.log_dir is not None:
            self.log_dir.mkdir(parents=True, exist_ok=True)
            out = open(self.log_dir / f"{name}.log", "ab")  # noqa: SIM115 (owned by the child)
        elif not self.quiet:
            out = None
        proc = subprocess.Popen(
            argv, env=self.child_env(**env), stdout=out, stderr=subprocess.STDOUT, start_new_session=True
        )
        self._children = [(n, p) for n, p in self._children if n != name] + [(name, proc)]
        self._commands[name] = (argv, env)
        return proc

    def start(self, timeout_s: float = 60.0) -> LocalFarm:
        try:
            self._start(timeout_s)
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self, timeout_s: float) -> None:
        if not redis_answers(self.redis_url, settings=self.redis_settings()):
            if self.redis_url != DEFAULT_REDIS_URL:
                raise RuntimeError(f"nothing answers at FARM_REDIS_URL={self.redis_url}")
            self._redis = EmbeddedRedis().start()
            self.redis_url = self._redis.url
        self.api_port = self.api_port or free_port()
        deadline = time.monotonic() + timeout_s

        if self.llm_policy:
            for i in range(self.llm_servers):
                port = free_port()
                serve = [
                    "llm",
                    "serve",
                    "--policy",
                    self.llm_policy,
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(port),
                ]
                self._spawn(f"llm{i}", [sys.executable, "-m", "farm.cli", *serve, *self.llm_args])
                self.llm_urls.append(f"http://127.0.0.1:{port}/v1")
        uvicorn = ["uvicorn", "farm.api.app:create_app", "--factory", "--host", "127.0.0.1"]
        uvicorn += ["--port", str(self.api_port), "--log-level", "warning", "--no-access-log"]
        uvicorn += ["--timeout-keep-alive", "75"]  # trainers hold pools of keep-alive connections
        self._spawn("api", [sys.executable, "-m", *uvicorn])
        tag = f"{self.api_port}"
        for i, worker in enumerate(self.workers):
            label = worker.name or worker.queues.replace(",", "+")
            env = {"FARM_NODE": worker.node} if worker.node else {}
            argv = [sys.executable, "-m", "celery", "-A", worker.app, "worker", "-Q", worker.queues]
            argv += ["-P", worker.pool, "-c", str(worker.concurrency), "-n", f"{label}-{i}-{tag}@%h"]
            argv += ["--without-gossip", "--without-mingle", "--without-heartbeat", "-l", "warning"]
            self._spawn(f"worker-{label}-{i}", argv, **env)

        self._wait_http(f"{self.api_url}/healthz", deadline)
        for url in self.llm_urls:
            self._wait_http(f"{url}/models", deadline)
        self._wait_workers(deadline)
        with httpx.Client(timeout=10) as http:
            for url in self.llm_urls:
                http.post(f"{self.api_url}/add_llm_server", json={"address": url}).raise_for_status()
        if self.supervise:
            self._watch_stop.clear()
            threading.Thread(target=self._watch, name="farm-supervisor", daemon=True).start()

    def _watch(self) -> None:
        while not self._watch_stop.wait(1.0):
            for name, proc in list(self._children):
                if name.startswith("worker-") and proc.poll() is not None and not self._watch_stop.is_set():
                    log.warning("%s exited with code %s; restarting it", name, proc.returncode)
                    self.restarts += 1
                    self.respawn(name)

    def _check_children(self) -> None:
        for name, proc in self._children:
            if proc.poll() is not None:
                hint = f" (see {self.log_dir / (name + '.log')})" if self.log_dir else ""
                raise RuntimeError(f"{name} exited with code {proc.returncode} while starting{hint}")

    def _wait_http(self, url: str, deadline: float) -> None:
        while True:
            self._check_children()
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(url, timeout=1.0).status_code < 500:
                    return
            if time.monotonic() > deadline:
                raise TimeoutError(f"{url} did not answer in time")
            time.sleep(0.1)

    def _wait_workers(self, deadline: float) -> None:
        client = redis_client(settings=self.redis_settings(), retry=False, decode_responses=True)
        tag = f"-{self.api_port}@"
        try:
            while True:
                self._check_children()
                names = [w["hostname"] for w in live_workers(client) if tag in w["hostname"]]
                if len(names) >= len(self.workers):
                    return
                if time.monotonic() > deadline:
                    raise TimeoutError(f"only {len(names)} of {len(self.workers)} workers came up")
                time.sleep(0.1)
        finally:
            client.close()

    def child(self, name: str) -> subprocess.Popen[bytes]:
        return dict(self._children)[name]

    def worker_names(self) -> list[str]:
        return [name for name, _ in self._children if name.startswith("worker-")]

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        """Signal one child's whole process group (a worker and its pool processes)."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.child(name).pid, sig)

    def respawn(self, name: str) -> subprocess.Popen[bytes]:
        """Start a child again with the command it was first started with (after `kill`)."""
        old = self.child(name)
        with contextlib.suppress(subprocess.TimeoutExpired):
            old.wait(10)
        argv, env = self._commands[name]
        return self._spawn(name, argv, **env)

    def alive(self) -> bool:
        return all(proc.poll() is None for _, proc in self._children)

    def children(self) -> list[tuple[str, subprocess.Popen[bytes]]]:
        return list(self._children)

    def stop(self, grace_s: float = 10.0) -> None:
        self._watch_stop.set()
        for _, proc in reversed(self._children):
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        for _, proc in self._children:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(max(0.0, deadline - time.monotonic()))
        for _, proc in self._children:
            # Kill the whole group: a worker's pool children or a stray tool process included.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(5)
        self._children.clear()
        if self._redis is not None:
            self._redis.stop()
            self._redis = None

    def __enter__(self) -> LocalFarm:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


@contextlib.contextmanager
def stop_signals_as_keyboard_interrupt() -> Iterator[None]:
    """So `farm up` stops the same way on Ctrl-C and under a supervisor (SIGTERM). SIGINT is taken
    even when it arrived ignored (a process started in the background by a script): Python would
    otherwise leave it ignored, and "Ctrl-C stops everything" would not hold."""

    def handler(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    previous = {signum: signal.signal(signum, handler) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for signum, earlier in previous.items():
            signal.signal(signum, earlier)
