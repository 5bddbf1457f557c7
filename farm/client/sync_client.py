"""Blocking client for the whole API (docs/CONTRACT.md) (management, task API), built on httpx."""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, Literal, TypeVar

import httpx

from farm.client import calls
from farm.client.calls import Call, CancelAnswer, JobAccepted
from farm.client.connection import client_options, transport_error
from farm.client.errors import FarmTimeout
from farm.client.polling import Backoff, PollPolicy, deadline_after, expired
from farm.models import BackendInfo, CancelRequest, JobResult, SamplingParams, SubmitResponse, TaskRequest
from farm.models import TaskStatus as TaskStatusModel
from farm.models.publish import PublishRequest, PublishResult

T = TypeVar("T")


class FarmClient:
    """`FarmClient("http://127.0.0.1:8000", token=...)`; unset arguments come from FARM_API_* settings."""

    def __init__(
        self,
        base_url: str | None = None,
        *,
        token: str | None = None,
        timeout_s: float = 30.0,
        poll: PollPolicy | None = None,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        options = client_options(base_url, token, timeout_s)
        self.base_url: str = options["base_url"]
        self.poll = poll or PollPolicy()
        self._http = httpx.Client(transport=transport or httpx.HTTPTransport(retries=2), **options)

    def __enter__(self) -> FarmClient:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()

    def close(self) -> None:
        self._http.close()

    def _do(self, call: Call[T]) -> T:
        try:
            response = self._http.request(call.method, call.path, **call.request_kwargs())
        except httpx.TransportError as exc:
            raise transport_error(call, self.base_url, exc) from exc
        return call.parse(response)

    # --- jobs -------------------------------------------------------------------------------------

    def process(
        self,
        instance: Mapping[str, Any],
        sampling_params: SamplingParams | Mapping[str, Any] | None = None,
        *,
        job_id: str | None = None,
        timeout_s: float | None = None,
        metadata: Mapping[str, Any] | None = None,
        priority: int = 0,
    ) -> JobResult:
        """POST /process and block until the job is terminal (polling on if the server stops waiting).

        Re-sending the same `job_id` waits for that job instead of queueing it again."""
        call = calls.process(
            instance,
            sampling_params,
            wait=True,
            job_id=job_id,
            timeout_s=timeout_s,
            metadata=metadata,
            priority=priority,
        )
        answer: JobResult | JobAccepted = self._do(call)
        if isinstance(answer, JobAccepted):
            return self.wait(answer.job_id)
        return answer

    def submit(
        self,
        instance: Mapping[str, Any],
        sampling_params: SamplingParams | Mapping[str, Any] | None = None,
        *,
        job_id: str | None = None,
        timeout_s: float | None = None,
        metadata: Mapping[str, Any] | None = None,
        priority: int = 0,
    ) -> str:
        """POST /process with wait=false; returns the job id at once."""
        call = calls.process(
            instance,
            sampling_params,
            wait=False,
            job_id=job_id,
            timeout_s=timeout_s,
            metadata=metadata,
            priority=priority,
        )
        accepted: JobAccepted = self._do(call)
        return accepted.job_id

    def get_job(self, job_id: str) -> JobResult:
        return self._do(calls.get_job(job_id))

    def finished(self, job_ids: Iterable[str]) -> list[JobResult]:
        """One sweep: the results among `job_ids` that are terminal now."""
        results = (self.get_job(job_id) for job_id in job_ids)
        return [result for result in results if result.state.terminal]

    def wait(self, job_id: str, timeout_s: float | None = None) -> JobResult:
        """Poll GET /jobs/{id} with backoff until terminal; FarmTimeout after `timeout_s`."""
        for result in self.as_completed([job_id], timeout_s=timeout_s):
            return result
        raise AssertionError("as_completed yields every job or raises")

    def as_completed(self, job_ids: Iterable[str], timeout_s: float | None = None) -> Iterator[JobResult]:
        """Yield results in the order they finish; FarmTimeout lists the jobs still pending."""
        pending = list(dict.fromkeys(job_ids))
        deadline = deadline_after(timeout_s)
        backoff = Backoff(self.poll)
        while pending:
            done = self.finished(pending)
            if done:
                backoff.progress()
                finished_ids = {result.job_id for result in done}
                pending = [job_id for job_id in pending if job_id not in finished_ids]
                yield from done
                continue
            if expired(deadline):
                raise FarmTimeout(f"{len(pending)} job(s) not finished after {timeout_s}s", pending=pending)
            time.sleep(backoff.next_delay(deadline))

    def cancel(
        self,
        job_id: str | None = None,
        *,
        task_id: str | None = None,
        group_id: str | None = None,
        older_than_policy_version: int | None = None,
    ) -> CancelAnswer:
        request = CancelRequest(
            job_id=job_id,
            task_id=task_id,
            group_id=group_id,
            older_than_policy_version=older_than_policy_version,
        )
        return self._do(calls.cancel(request))

    # --- backends ---------------------------------------------------------------------------------

    def add_llm_server(
        self, address: str, *, weight: int = 1, kind: str = "vllm", policy_version: int | None = None
    ) -> list[BackendInfo]:
        """Re-adding a registered address with a new `policy_version` publishes weights in place."""
        return self._do(calls.add_llm_server(address, weight, kind, policy_version))

    def publish_weights(
        self,
        policy_version: int,
        weights_path: str,
        *,
        addresses: list[str] | None = None,
        pause: Literal["keep", "wait"] = "keep",
        timeout_s: float = 600.0,
    ) -> PublishResult:
        """Publish a checkpoint to every backend (or `addresses`) through its server's own routes; each is
        labelled `policy_version` once its server confirms it, or leaves the pool (the result says why)."""
        request = PublishRequest(policy_version=policy_version, weights_path=weights_path,
                                 addresses=addresses, pause=pause, timeout_s=timeout_s)  # fmt: skip
        return self._do(calls.publish_weights(request))

    def remove_llm_server(self, address: str) -> list[BackendInfo]:
        return self._do(calls.remove_llm_server(address))

    def clear_llm_servers(self) -> list[BackendInfo]:
        return self._do(calls.clear_llm_servers())

    def llm_servers(self) -> list[BackendInfo]:
        return self._do(calls.llm_servers())

    def swap_llm_servers(self, addresses: Iterable[str], *, kind: str = "vllm") -> list[BackendInfo]:
        """Checkpoint swap: clear the pool, then add the servers that hold the new weights."""
        backends = self.clear_llm_servers()
        for address in addresses:
            backends = self.add_llm_server(address, kind=kind)
        return backends

    # --- service ----------------------------------------------------------------------------------

    def start(self) -> Any:
        return self._do(calls.start())

    def stop(self) -> Any:
        return self._do(calls.stop())

    def status(self) -> Any:
        return self._do(calls.status())

    def healthz(self) -> bool:
        return self._do(calls.healthz())

    # --- task API ---------------------------------------------------------------------------------

    def submit_task(self, task: TaskRequest | Mapping[str, Any]) -> SubmitResponse:
        return self._do(calls.submit_task(task))

    def get_task(self, task_id: str) -> TaskStatusModel:
        return self._do(calls.get_task(task_id))

    def rollout_status(self) -> Any:
        return self._do(calls.rollout_status())
