"""Every endpoint of docs/CONTRACT.md as a `Call`: the request to send and how to read the answer.

The sync and async clients only differ in how they send a `Call`, so the wire knowledge lives here once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import httpx
from pydantic import BaseModel, ConfigDict, TypeAdapter

from farm.client.errors import FarmError
from farm.models import (
    AddLLMServerRequest,
    BackendInfo,
    CancelRequest,
    JobResult,
    ProcessRequest,
    SamplingParams,
    SubmitResponse,
    TaskRequest,
    TaskStatus,
)
from farm.models.offpolicy import OffPolicyReport
from farm.models.publish import PublishRequest, PublishResult

T = TypeVar("T")


class JobAccepted(BaseModel):
    """202 answer of POST /process with wait=false."""

    model_config = ConfigDict(extra="allow")

    job_id: str


class CancelAnswer(BaseModel):
    """POST /cancel answer; by-job answers carry `job_id` and `state`, bulk ones whatever the farm adds."""

    model_config = ConfigDict(extra="allow")

    job_id: str | None = None
    state: str | None = None


_BACKENDS = TypeAdapter(list[BackendInfo])


@dataclass(frozen=True)
class Call(Generic[T]):
    method: str
    path: str
    parse: Callable[[httpx.Response], T]
    json: Any = None
    timeout: httpx.Timeout | float | object | None = httpx.USE_CLIENT_DEFAULT

    def request_kwargs(self) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"timeout": self.timeout}
        if self.json is not None:
            kwargs["json"] = self.json
        return kwargs


def raise_for_answer(response: httpx.Response) -> None:
    if response.is_success:
        return
    try:
        body = response.json()
        detail = body.get("detail", body) if isinstance(body, dict) else body
    except ValueError:
        detail = response.text
    raise FarmError(
        f"{response.request.method} {response.request.url.path} -> {response.status_code}: "
        f"{_describe(detail)}",
        status=response.status_code,
        detail=detail,
    )


def _describe(detail: Any) -> str:
    """FastAPI 422 details are lists of {loc, msg}; name the fields so the message stands alone."""
    if isinstance(detail, list) and detail and all(isinstance(d, Mapping) for d in detail):
        parts = []
        for item in detail:
            loc = ".".join(str(p) for p in item.get("loc", ()) if p != "body")
            parts.append(f"{loc}: {item.get('msg', '')}" if loc else str(item.get("msg", item)))
        return "; ".join(parts)
    return str(detail)


def _model(model: type[BaseModel]) -> Callable[[httpx.Response], Any]:
    def parse(response: httpx.Response) -> Any:
        raise_for_answer(response)
        return model.model_validate(response.json())

    return parse


def _json(response: httpx.Response) -> Any:
    raise_for_answer(response)
    return response.json()


def _backends(response: httpx.Response) -> list[BackendInfo]:
    raise_for_answer(response)
    body = response.json()
    # The contract says "the backend list"; accept it bare or wrapped as {"backends": [...]}.
    if isinstance(body, dict):
        body = body.get("backends", body.get("servers", []))
    return _BACKENDS.validate_python(body)


def _healthy(response: httpx.Response) -> bool:
    return response.status_code == 200


def process(
    instance: Mapping[str, Any],
    sampling_params: SamplingParams | Mapping[str, Any] | None,
    *,
    wait: bool,
    job_id: str | None,
    timeout_s: float | None,
    metadata: Mapping[str, Any] | None,
    priority: int = 0,
) -> Call[Any]:
    body = ProcessRequest(
        instance=dict(instance),
        sampling_params=SamplingParams.model_validate(sampling_params or {}),
        job_id=job_id,
        timeout_s=timeout_s,
        wait=wait,
        metadata=dict(metadata or {}),
        priority=priority,
    ).model_dump(mode="json", exclude_none=True)
    if not wait:
        return Call("POST", "/process", _model(JobAccepted), json=body)
    # No read timeout: time queued is unbounded and does not count against the job's own budget.
    return Call("POST", "/process", _final_or_accepted, json=body, timeout=httpx.Timeout(10.0, read=None))


def _final_or_accepted(response: httpx.Response) -> JobResult | JobAccepted:
    """A blocking POST /process answers 202 when the server's own wait limit ends first."""
    raise_for_answer(response)
    if response.status_code == 202:
        return JobAccepted.model_validate(response.json())
    return JobResult.model_validate(response.json())


def get_job(job_id: str) -> Call[JobResult]:
    return Call("GET", f"/jobs/{job_id}", _model(JobResult))


def cancel(request: CancelRequest) -> Call[CancelAnswer]:
    body = request.model_dump(mode="json", exclude_none=True)
    if not body:
        raise ValueError("cancel needs job_id, task_id, group_id or older_than_policy_version")
    return Call("POST", "/cancel", _model(CancelAnswer), json=body)


def add_llm_server(
    address: str, weight: int, kind: str, policy_version: int | None = None
) -> Call[list[BackendInfo]]:
    fields = {"address": address, "weight": weight, "kind": kind, "policy_version": policy_version}
    body = AddLLMServerRequest.model_validate(fields)
    return Call("POST", "/add_llm_server", _backends, json=body.model_dump(mode="json", exclude_none=True))


def publish_weights(request: PublishRequest) -> Call[PublishResult]:
    """No read timeout of its own beyond the request's: each backend's protocol ends by `timeout_s`."""
    body = request.model_dump(mode="json", exclude_none=True)
    limit = httpx.Timeout(10.0, read=request.timeout_s + 30.0)
    return Call("POST", "/publish_weights", _model(PublishResult), json=body, timeout=limit)


def remove_llm_server(address: str) -> Call[list[BackendInfo]]:
    return Call("POST", "/remove_llm_server", _backends, json={"address": address})


def clear_llm_servers() -> Call[list[BackendInfo]]:
    return Call("POST", "/clear_llm_server", _backends)


def llm_servers() -> Call[list[BackendInfo]]:
    return Call("GET", "/llm_servers", _backends)


def start() -> Call[Any]:
    return Call("POST", "/start", _json)


def stop() -> Call[Any]:
    return Call("POST", "/stop", _json)


def status() -> Call[Any]:
    return Call("GET", "/status", _json)


def healthz() -> Call[bool]:
    return Call("GET", "/healthz", _healthy)


def submit_task(task: TaskRequest | Mapping[str, Any]) -> Call[SubmitResponse]:
    body = TaskRequest.model_validate(task).model_dump(mode="json", exclude_none=True)
    for (
        name
    ) in GROUP_DEFAULTS:  # left at their defaults, the group fields are not sent (older farms refuse them)
        if body.get(name) == TaskRequest.model_fields[name].default:
            del body[name]
    return Call("POST", "/rollout/task/submit", _model(SubmitResponse), json=body)


GROUP_DEFAULTS = ("stragglers", "infra_reruns")
"""TaskRequest fields with a non-null default that only a group uses (docs/CONTRACT.md, task API)."""


def get_task(task_id: str) -> Call[TaskStatus]:
    return Call("GET", f"/rollout/task/{task_id}", _model(TaskStatus))


def report_offpolicy(report: OffPolicyReport) -> Call[None]:
    return Call("POST", "/metrics/offpolicy", lambda _: None, json=report.model_dump(mode="json"))


def rollout_status() -> Call[Any]:
    return Call("GET", "/rollout/status", _json)
