"""Asyncio client for the whole API (docs/CONTRACT.md); same methods as FarmClient, awaited."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable, Mapping
from typing import Any, Literal, TypeVar

import httpx

from farm.client import calls
from farm.client.calls import Call, CancelAnswer, JobAccepted
from farm.client.connection import client_options, transport_error
from farm.client.errors import FarmTimeout
from farm.client.polling import Backoff, PollPolicy, deadline_after, expired
from farm.models import BackendInfo, CancelRequest, JobResult, SamplingParams, SubmitResponse, TaskRequest
from farm.models import TaskStatus as TaskStatusModel
from farm.models.offpolicy import OffPolicyReport
from farm.models.publish import PublishRequest, PublishResult

T = TypeVar("T")


class AsyncFarmClient:
    """`async with AsyncFarmClient(url) as farm: await farm.process(...)`; sweeps poll jobs concurrently."""

    def __init__(
        self,
        base_url: str | None = None,
        *,
        token: str | None = None,
        timeout_s: float = 30.0,
        poll: PollPolicy | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        max_concurrent_requests: int = 32,
    ) -> None:
        options = client_options(base_url, token, timeout_s)
        self.base_url: str = options["base_url"]
        self.poll = poll or PollPolicy()
        self._http = httpx.AsyncClient(transport=transport or httpx.AsyncHTTPTransport(retries=2), **options)
        self._sweep_limit = asyncio.Semaphore(max_concurrent_requests)

    async def __aenter__(self) -> AsyncFarmClient:
        return self

    async def __aexit__(self, *_: object) -> None:
        await self.close()

    async def close(self) -> None:
        await self._http.aclose()

    async def _do(self, call: Call[T]) -> T:
        try:
            response = await self._http.request(call.method, call.path, **call.request_kwargs())
        except httpx.TransportError as exc:
            raise transport_error(call, self.base_url, exc) from exc
        return call.parse(response)

    # --- jobs -------------------------------------------------------------------------------------

    async def process(
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
        answer: JobResult | JobAccepted = await self._do(call)
        if isinstance(answer, JobAccepted):
            return await self.wait(answer.job_id)
        return answer

    async def submit(
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
        accepted: JobAccepted = await self._do(call)
        return accepted.job_id

    async def get_job(self, job_id: str) -> JobResult:
        return await self._do(calls.get_job(job_id))

    async def finished(self, job_ids: Iterable[str]) -> list[JobResult]:
        """One sweep: the results among `job_ids` that are terminal now."""
        results = await asyncio.gather(*(self._limited_get(job_id) for job_id in job_ids))
        return [result for result in results if result.state.terminal]

    async def _limited_get(self, job_id: str) -> JobResult:
        async with self._sweep_limit:
            return await self.get_job(job_id)

    async def wait(self, job_id: str, timeout_s: float | None = None) -> JobResult:
        """Poll GET /jobs/{id} with backoff until terminal; FarmTimeout after `timeout_s`."""
        async for result in self.as_completed([job_id], timeout_s=timeout_s):
            return result
        raise AssertionError("as_completed yields every job or raises")

    async def as_completed(
        self, job_ids: Iterable[str], timeout_s: float | None = None
    ) -> AsyncIterator[JobResult]:
        """Yield results in the order they finish; FarmTimeout lists the jobs still pending."""
        pending = list(dict.fromkeys(job_ids))
        deadline = deadline_after(timeout_s)
        backoff = Backoff(self.poll)
        while pending:
            done = await self.finished(pending)
            if done:
                backoff.progress()
                finished_ids = {result.job_id for result in done}
                pending = [job_id for job_id in pending if job_id not in finished_ids]
                for result in done:
                    yield result
                continue
            if expired(deadline):
                raise FarmTimeout(f"{len(pending)} job(s) not finished after {timeout_s}s", pending=pending)
            await asyncio.sleep(backoff.next_delay(deadline))

    async def cancel(
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
        return await self._do(calls.cancel(request))

    # --- backends ---------------------------------------------------------------------------------

    async def add_llm_server(
        self, address: str, *, weight: int = 1, kind: str = "vllm", policy_version: int | None = None
    ) -> list[BackendInfo]:
        """Re-adding a registered address with a new `policy_version` publishes weights in place."""
        return await self._do(calls.add_llm_server(address, weight, kind, policy_version))

    async def publish_weights(
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
        return await self._do(calls.publish_weights(request))

    async def remove_llm_server(self, address: str) -> list[BackendInfo]:
        return await self._do(calls.remove_llm_server(address))

    async def clear_llm_servers(self) -> list[BackendInfo]:
        return await self._do(calls.clear_llm_servers())

    async def llm_servers(self) -> list[BackendInfo]:
        return await self._do(calls.llm_servers())

    async def swap_llm_servers(self, addresses: Iterable[str], *, kind: str = "vllm") -> list[BackendInfo]:
        """Checkpoint swap: clear the pool, then add the servers that hold the new weights."""
        backends = await self.clear_llm_servers()
        for address in addresses:
            backends = await self.add_llm_server(address, kind=kind)
        return backends

    # --- service ----------------------------------------------------------------------------------

    async def start(self) -> Any:
        return await self._do(calls.start())

    async def stop(self) -> Any:
        return await self._do(calls.stop())

    async def status(self) -> Any:
        return await self._do(calls.status())

    async def healthz(self) -> bool:
        return await self._do(calls.healthz())

    # --- task API ---------------------------------------------------------------------------------

    async def submit_task(self, task: TaskRequest | Mapping[str, Any]) -> SubmitResponse:
        return await self._do(calls.submit_task(task))

    async def get_task(self, task_id: str) -> TaskStatusModel:
        return await self._do(calls.get_task(task_id))

    async def report_offpolicy(self, report: OffPolicyReport) -> None:
        """One batch's off-policy lag, for the farm's gauges (the DAPO consumer sends it per batch)."""
        await self._do(calls.report_offpolicy(report))

    async def rollout_status(self) -> Any:
        return await self._do(calls.rollout_status())
