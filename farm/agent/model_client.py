"""A job's token-in/token-out client: sticky backend from the pool, failover, swap-tolerant waiting."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx

from farm.agent.versions import TurnVersions, spanned_publish
from farm.errors import NoBackendAvailable
from farm.inference.backend import BackendClient
from farm.inference.errors import InferenceError
from farm.inference.generation import Generation
from farm.inference.policy import Attempts, NoBackendWait, Step, Verdict, error_verdict
from farm.pool import BackendPool
from farm.settings import get_settings

log = logging.getLogger(__name__)

_http: httpx.Client | None = None
_http_lock = threading.Lock()


def shared_http() -> httpx.Client:
    """One connection pool per worker process, shared by every job it runs."""
    global _http
    with _http_lock:
        if _http is None:
            limits = httpx.Limits(max_connections=256, max_keepalive_connections=64)
            _http = httpx.Client(limits=limits, timeout=httpx.Timeout(600.0, connect=5.0))
        return _http


class PolicyClient:
    """Generates for one job. The job stays pinned to one backend (prefix-cache reuse) until that
    backend fails or leaves the pool; then it moves. With no backend registered (a checkpoint swap in
    progress) it waits, checking cancellation, until one appears or the job's deadline passes."""

    def __init__(
        self,
        pool: BackendPool,
        key: str,
        check: Callable[[], None],
        remaining: Callable[[], float],
        http: httpx.Client | None = None,
        max_failovers: int = 3,
        max_policy_lag: int | None = None,
        min_policy_version: int | None = None,
    ) -> None:
        self.pool = pool
        self.key = key
        self.check = check
        self.remaining = remaining
        self.http = http or shared_http()
        self.max_failovers = max_failovers
        self.backends_used: list[str] = []
        self.calls = 0
        self.min_policy_version = min_policy_version
        """Only backends serving this version or newer are used (a job's `metadata.min_policy_version`)."""
        self.versions = TurnVersions(max_policy_lag)
        """The policy version of each call (farm/agent/versions.py)."""
        self.tool_call_parser: str | None = None
        """The tool-call parser the backend of the last call was registered with (None: not named)."""

    def generate(self, prompt_ids: list[int], sampling: dict[str, Any]) -> Generation:
        """Failover, attempt limits and what counts as the backend's trouble: farm/inference/policy.py,
        shared with the gateway. Only a failover verdict moves on; a timeout whose cause is the job's
        spent budget ends the job as a timeout (the check raises JobDeadlineExceeded)."""
        attempts = Attempts(max_attempts=self.max_failovers + 1)
        waiting = NoBackendWait(limit_s=get_settings().no_backend_wait_s)
        while True:
            self.check()
            backend = self.pool.acquire(self.key, self.min_policy_version)
            if backend is None:
                wait = waiting.wait_s(self.remaining())
                if wait is None:
                    said = self._no_backend(waiting.waited_s)
                    if self.min_policy_version is not None:
                        said = (
                            f"no healthy inference backend serves policy version {self.min_policy_version} "
                            f"or newer (the job's metadata.min_policy_version); {said}"
                        )
                    raise NoBackendAvailable(said)
                time.sleep(wait)
                continue
            self.versions.check(backend.policy_version)
            client = BackendClient(
                backend.address, backend.kind, self.http, policy_version=backend.policy_version
            )
            attempts.begin()
            self.pool.call_started(backend.address)
            try:
                # Bounded by the job's budget, and a cancel interrupts the call in flight.
                generation = client.generate(
                    prompt_ids, sampling, budget_s=self.remaining(), check=self.check
                )
            except InferenceError as exc:
                self._failed(attempts, backend.address, exc)
                continue
            finally:
                self.pool.call_finished(backend.address)
            self.calls += 1
            ended = self.pool.registration(backend.address)
            change = spanned_publish((backend.policy_version, backend.publishing), ended)
            self.versions.record(generation.weight_version, backend.policy_version, change)
            self.tool_call_parser = backend.tool_call_parser
            if not self.backends_used or self.backends_used[-1] != backend.address:
                self.backends_used.append(backend.address)
            return generation

    def _no_backend(self, waited_s: float) -> str:
        """Why no backend could take the call: every registered address and its recorded error."""
        listed = self.pool.list()
        said = f"no healthy inference backend after {waited_s:.1f} s (FARM_NO_BACKEND_WAIT_S)"
        if not listed:
            return f"{said}: none is registered (POST /add_llm_server)"
        named = "; ".join(f"{b.address}: {b.error or 'unhealthy'}" for b in listed)
        return f"{said}; tried {named}"

    def _failed(self, attempts: Attempts, address: str, exc: InferenceError) -> None:
        """Returns when the call moves to the next backend; raises otherwise."""
        verdict = error_verdict(exc)
        step = attempts.after(verdict, address, str(exc))
        if step is Step.fail:
            if verdict is Verdict.timeout:
                self.check()
            raise exc
        log.warning("backend %s failed for %s: %s", address, self.key, exc)
        self.pool.mark_unhealthy(address, str(exc))
        if step is Step.give_up:
            raise exc
