"""Starting a whole local farm as child processes: Redis (a private one unless a URL is given), the
API, one Celery worker per stage queue and the reference LLM server. Used by `farm up`, `farm demo` and the
integration tests, so all three run the farm the same way.

Every child gets its own process group; stopping sends SIGTERM to the workers first (they give their
stages back), then to the rest, waits, then SIGKILLs what is left, so Ctrl-C or the end of a demo
leaves no process behind. Several farms share a host: each has its own id (farm/identity.py), which
names its workers and its default scratch directory.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import httpx

from farm.children import spawn, stopped_on_failure
from farm.embedded_redis import EmbeddedRedis, free_port, port_in_use
from farm.identity import DEFAULT_WORKDIR, farm_id, farm_workdir, mask_url
from farm.memory import child_env as malloc_child_env
from farm.redis_clients import redis_answers, redis_client
from farm.settings import DEFAULT_SENTINEL_MASTER, Settings
from farm.web.serving import bind_listening
from farm.workers import live_workers

log = logging.getLogger(__name__)


class FarmStartError(RuntimeError):
    """The farm cannot start for a reason the operator can fix; the message is one line saying which."""


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
class Backoff:
    """Restart delays for one supervised child: doubling from `base_s` up to `cap_s`, back to `base_s`
    once the child has stayed up for `stable_s`."""

    base_s: float = 0.5
    cap_s: float = 30.0
    stable_s: float = 60.0
    failures: int = 0

    def next_delay(self, uptime_s: float) -> float:
        if uptime_s >= self.stable_s:
            self.failures = 0
        delay: float = min(self.cap_s, self.base_s * 2**self.failures)
        self.failures += 1
        return delay


@dataclass
class LocalFarm:
    redis_url: str | None = None
    """The farm's Redis; None starts a private redis-server (never whatever answers on 6379)."""
    api_port: int = 0
    redis_port: int = 0
    """Port of the private redis-server (0: a free one)."""
    llm_port: int = 0
    """Port of the first reference LLM server, the next ones counting up from it (0: free ones)."""
    workers: list[WorkerSpec] = field(default_factory=default_workers)
    llm_policy: str | None = "scripted"
    """Start the reference LLM server with this policy and register it; None starts none."""
    llm_args: list[str] = field(default_factory=list)
    llm_servers: int = 1
    env: dict[str, str] = field(default_factory=dict)
    log_dir: Path | None = None
    """Where each child's output goes (`<child>.log`). None and quiet: a private directory removed at
    stop, read back when a child dies while starting, so the error says why."""
    quiet: bool = True
    supervise: bool = False
    """Restart a child that exits on its own (as systemd's Restart=always would), with backoff: a Celery
    worker can die on a broker connection error (a kombu bug seen when Redis restarts)."""
    check_port: bool = False
    """Refuse to start (FarmStartError "port N in use") when `api_port` is taken, before starting anything."""

    _redis: EmbeddedRedis | None = None
    _own_logs: Path | None = None
    _children: list[tuple[str, subprocess.Popen[bytes]]] = field(default_factory=list)
    _commands: dict[str, tuple[list[str], dict[str, str]]] = field(default_factory=dict)
    _listens: dict[str, tuple[str, int] | None] = field(default_factory=dict)
    llm_urls: list[str] = field(default_factory=list)
    restarts: int = 0
    _watch_stop: threading.Event = field(default_factory=threading.Event)
    _started_at: dict[str, float] = field(default_factory=dict)
    _backoff: dict[str, Backoff] = field(default_factory=dict)
    _due: dict[str, float] = field(default_factory=dict)

    @property
    def id(self) -> str:
        """The farm id (farm/identity.py); known once the Redis URL is."""
        if self.redis_url is None:
            raise RuntimeError("the farm has no Redis yet: start() it first")
        return farm_id(self.redis_url)

    @property
    def scratch_dir(self) -> str:
        """Scratch directory of the children: FARM_WORKDIR if given, else a per-farm one."""
        given = self.env.get("FARM_WORKDIR") or os.environ.get("FARM_WORKDIR")
        return given or str(farm_workdir(self.redis_url or "", DEFAULT_WORKDIR))

    @property
    def api_url(self) -> str:
        return f"http://127.0.0.1:{self.api_port}"

    def child_env(self, **extra: str) -> dict[str, str]:
        env = {**os.environ, "FARM_GATEWAY_URL": f"{self.api_url}/gateway", **self.env}
        env = {**env, "FARM_REDIS_URL": self.redis_url or "", "FARM_WORKDIR": self.scratch_dir, **extra}
        env.setdefault("PYTHONUNBUFFERED", "1")
        for key, value in malloc_child_env().items():
            env.setdefault(key, value)  # glibc reads it before any Python code (farm/memory.py)
        return env

    def redis_settings(self) -> Settings:
        """How this process reaches the farm's Redis: the URL and Sentinel settings its children get."""
        env = self.child_env()
        return Settings(
            redis_url=self.redis_url or "",
            redis_sentinel_master=env.get("FARM_REDIS_SENTINEL_MASTER") or DEFAULT_SENTINEL_MASTER,
            redis_sentinel_password=env.get("FARM_REDIS_SENTINEL_PASSWORD") or None,
        )

    def _spawn(
        self,
        name: str,
        argv: list[str],
        env: dict[str, str] | None = None,
        listen: tuple[str, int] | None = None,
    ) -> subprocess.Popen[bytes]:
        """Start child `name`; a server gets its socket on `listen` (host, port) bound here and handed
        down (`--fd`, farm/web/serving.py), so no other process can take the port before it serves."""
        sock = bind_listening(*listen) if listen else None
        try:
            return self._spawn_child(name, argv, sock, listen, env or {})
        finally:
            if sock is not None:
                sock.close()  # the child holds its own copy

    def _spawn_child(
        self,
        name: str,
        argv: list[str],
        sock: socket.socket | None,
        listen: tuple[str, int] | None,
        env: dict[str, str],
    ) -> subprocess.Popen[bytes]:
        out: int | IO[bytes] | None = None
        if self.log_dir is None and self.quiet and self._own_logs is None:
            self._own_logs = Path(tempfile.mkdtemp(prefix="farm-start-logs-"))
        logs = self.log_dir or (self._own_logs if self.quiet else None)
        if logs is not None:
            logs.mkdir(parents=True, exist_ok=True)
            out = open(logs / f"{name}.log", "ab")  # noqa: SIM115 (owned by the child)
        fds = [sock.fileno()] if sock else []
        proc = spawn(  # dies with this process, even SIGKILLed (farm/children.py)
            [*argv, *(["--fd", str(fds[0])] if fds else [])],
            env=self.child_env(**env),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            pass_fds=fds,
        )
        self._children = [(n, p) for n, p in self._children if n != name] + [(name, proc)]
        self._commands[name] = (argv, env)
        self._listens[name] = listen
        self._started_at[name] = time.monotonic()
        return proc

    def start(self, timeout_s: float = 60.0) -> LocalFarm:
        if self._children:
            # A second start would spawn a second API on the first one's port: it dies at its bind, and
            # whether that fails the start depended on timing (CI's family-farm "api exited with code 3").
            raise RuntimeError("the farm is already running: stop() it first")
        with stopped_on_failure(self.stop):
            self._start(timeout_s)
        return self

    def _start(self, timeout_s: float) -> None:
        fixed = [self.api_port] if self.check_port else []
        fixed += [self.redis_port] if self.redis_url is None else []
        if self.llm_policy and self.llm_port:
            fixed += [self.llm_port + i for i in range(self.llm_servers)]
        for port in fixed:  # every port asked for, before anything starts
            if port and port_in_use(port):
                raise FarmStartError(f"port {port} in use")
        if self.redis_url is None:
            self._redis = EmbeddedRedis(port=self.redis_port or 0).start()
            self.redis_url = self._redis.url
        elif not redis_answers(self.redis_url, settings=self.redis_settings()):
            raise FarmStartError(f"Redis at {mask_url(self.redis_url)} does not answer (FARM_REDIS_URL)")
        self.api_port = self.api_port or free_port()
        deadline = time.monotonic() + timeout_s

        if self.llm_policy:
            for i in range(self.llm_servers):
                port = self.llm_port + i if self.llm_port else free_port()
                serve = ["llm", "serve", "--policy", self.llm_policy, "--host", "127.0.0.1"]
                argv = [sys.executable, "-m", "farm.cli", *serve, "--port", str(port), *self.llm_args]
                self._spawn(f"llm{i}", argv, listen=("127.0.0.1", port))
                self.llm_urls.append(f"http://127.0.0.1:{port}/v1")
        api = [sys.executable, "-m", "farm.cli", "api", "--host", "127.0.0.1", "--port", str(self.api_port)]
        self._spawn("api", api, listen=("127.0.0.1", self.api_port))
        for i, worker in enumerate(self.workers):
            label = worker.name or worker.queues.replace(",", "+")
            env = {"FARM_NODE": worker.node} if worker.node else {}
            argv = [sys.executable, "-m", "celery", "-A", worker.app, "worker", "-Q", worker.queues]
            # The host written out (Celery's `%h` would show literally in the table and the logs).
            name = f"{label}-{i}{self._tag}@{socket.gethostname()}"
            argv += ["-P", worker.pool, "-c", str(worker.concurrency), "-n", name]
            # Heartbeats (one PUBLISH per worker every 10 s) let Flower list the workers; Flower turns
            # task events on itself (enable_events) while it watches, so they cost nothing otherwise.
            argv += ["--without-gossip", "--without-mingle", "--heartbeat-interval", "10", "-l", "warning"]
            self._spawn(f"worker-{label}-{i}", argv, env)

        self._wait_http(f"{self.api_url}/healthz", deadline, healthy=_farm_healthy)
        for url in self.llm_urls:
            self._wait_http(f"{url}/models", deadline, healthy=lambda r: r.status_code == 200)
        self._wait_workers(deadline)
        with httpx.Client(timeout=10) as http:
            for url in self.llm_urls:
                http.post(f"{self.api_url}/add_llm_server", json={"address": url}).raise_for_status()
        if self.supervise:
            self._watch_stop.clear()
            threading.Thread(target=self._watch, name="farm-supervisor", daemon=True).start()

    @property
    def _tag(self) -> str:
        """Worker names end in farm id and API port: unique per farm, and per launch of one."""
        return f"-{self.id}-{self.api_port}"

    def _watch(self) -> None:
        while not self._watch_stop.wait(0.2):
            self.supervise_once()

    def supervise_once(self) -> None:
        """Restart, after its backoff delay, every child that has exited; log each exit and restart once."""
        now = time.monotonic()
        for name, proc in list(self._children):
            if proc.poll() is None or self._watch_stop.is_set():
                continue
            if name not in self._due:
                backoff = self._backoff.setdefault(name, Backoff())
                delay = backoff.next_delay(now - self._started_at.get(name, now))
                self._due[name] = now + delay
                log.warning("%s exited with code %s; restarting it in %.1f s", name, proc.returncode, delay)
            elif now >= self._due[name]:
                del self._due[name]
                self.restarts += 1
                self.respawn(name)
                log.warning("%s restarted (pid %s)", name, self.child(name).pid)

    def table(self) -> list[tuple[str, int, str]]:
        """What runs where: (child, pid, what it serves) for each child."""
        where: dict[str, str] = {"api": self.api_url}
        where |= {f"llm{i}": url for i, url in enumerate(self.llm_urls)}
        rows = []
        for name, proc in self._children:
            argv = self._commands[name][0]
            if name.startswith("worker-"):
                what = f"queues {argv[argv.index('-Q') + 1]} as {argv[argv.index('-n') + 1]}"
            else:
                what = where.get(name, "")
            rows.append((name, proc.pid, what))
        if self._redis is not None:
            rows.insert(
                0, ("redis", self._redis.process.pid if self._redis.process else 0, self.redis_url or "")
            )
        return rows

    def _check_children(self) -> None:
        for name, proc in self._children:
            if proc.poll() is not None:
                hint = f" (see {self.log_dir / (name + '.log')})" if self.log_dir else ""
                why = _last_lines(self.log_dir or self._own_logs, name)
                raise RuntimeError(f"{name} exited with code {proc.returncode} while starting{hint}{why}")

    def _wait_http(self, url: str, deadline: float, healthy: Callable[[httpx.Response], bool]) -> None:
        while True:
            self._check_children()
            with contextlib.suppress(httpx.HTTPError):
                if healthy(httpx.get(url, timeout=1.0)):
                    return
            if time.monotonic() > deadline:
                raise TimeoutError(f"{url} did not answer in time")
            time.sleep(0.1)

    def _wait_workers(self, deadline: float) -> None:
        client = redis_client(settings=self.redis_settings(), retry=False, decode_responses=True)
        tag = f"{self._tag}@"
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
        return self._spawn(name, argv, env, self._listens.get(name))

    def alive(self) -> bool:
        return all(proc.poll() is None for _, proc in self._children)

    def children(self) -> list[tuple[str, subprocess.Popen[bytes]]]:
        return list(self._children)

    def stop(self, grace_s: float = 10.0) -> None:
        self._watch_stop.set()
        # Workers first, while the API and the LLM still answer: a draining worker gives its stages
        # back to the queue, which needs them.
        workers = [p for n, p in self._children if n.startswith("worker-")]
        others = [p for n, p in reversed(self._children) if not n.startswith("worker-")]
        deadline = time.monotonic() + grace_s
        for group in (workers, others):
            for proc in group:
                if proc.poll() is None:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(proc.pid, signal.SIGTERM)
            for proc in group:
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
        if self._own_logs is not None:
            shutil.rmtree(self._own_logs, ignore_errors=True)
            self._own_logs = None

    def __enter__(self) -> LocalFarm:
        """`with farm:` starts it; `with farm.start(timeout_s=...):` enters the farm already running."""
        return self if self._children else self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _last_lines(logs: Path | None, child: str, count: int = 12) -> str:
    """The end of a child's output, to put in the error its death while starting raises."""
    if logs is None:
        return ""
    try:
        lines = (logs / f"{child}.log").read_text(errors="replace").splitlines()
    except OSError:
        return ""
    return (":\n  " + "\n  ".join(lines[-count:])) if lines else ""


def _farm_healthy(response: httpx.Response) -> bool:
    """Our API's /healthz, not another server's 404 or a page that happens to answer 200."""
    try:
        return response.status_code == 200 and response.json().get("ok") is True
    except ValueError:
        return False


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
