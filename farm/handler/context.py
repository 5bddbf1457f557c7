"""What a handler sees of its job while a stage runs."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any, Generic, Protocol

from pydantic import BaseModel
from typing_extensions import TypeVar

from farm.errors import JobCancelled, JobDeadlineExceeded, LeaseLost, WorkerDraining
from farm.jobs.spec import JobSpec
from farm.models.results import Timings

if TYPE_CHECKING:
    from farm.chat.tokenizer import ChatTokenizer
    from farm.inference.generation import Generation


class TurnVersionLog(Protocol):
    """The policy version of each model call of a job (farm/agent/versions.py), as its trace carries it."""

    def metadata(self) -> dict[str, Any]: ...


class TokenGenerator(Protocol):
    """What a handler's agent loop asks of the model: token ids in, sampled ids and logprobs out, bound
    to the job's backend. The workers give farm/agent/model_client.py's client (sticky backend, failover);
    the handler contract needs only this much of it."""

    backends_used: list[str]
    """The backends this job generated on, in order (a failover adds the next)."""

    @property
    def versions(self) -> TurnVersionLog:
        """The weight version that produced each call."""
        ...

    @property
    def tool_call_parser(self) -> str | None:
        """The tool-call parser the backend of the last call was registered with (None: not named)."""
        ...

    def generate(self, prompt_ids: list[int], sampling: dict[str, Any]) -> Generation: ...


InstanceT = TypeVar("InstanceT", bound=BaseModel, default=Any, covariant=True)  # the handler's instance model


@dataclass
class JobContext(Generic[InstanceT]):
    spec: JobSpec
    instance: InstanceT
    stage: str
    node: str
    workdir: Path
    """Scratch space of this job on this node (shared by its stages on the node)."""
    deadline: float
    """time.monotonic() at which the job's budget of in-stage time is spent."""
    timings_before: Timings
    """Time already spent, before this stage started."""
    interruption: Callable[[], str | None]
    """'revoked', 'lost', 'draining' or None: asked at every check, answered without I/O."""
    policy_factory: Callable[[JobContext[Any]], TokenGenerator]
    tokenizer_factory: Callable[[], ChatTokenizer]
    started: float = field(default_factory=time.monotonic)

    @property
    def job_id(self) -> str:
        return self.spec.job_id

    @property
    def metadata(self) -> dict[str, Any]:
        return self.spec.metadata

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    def check(self) -> None:
        """Raise if the job was cancelled, its budget is spent, or the stage must stop here.
        Cheap: call it between steps of long work and while waiting."""
        reason = self.interruption()
        if reason == "revoked":
            raise JobCancelled(f"job {self.job_id} was cancelled")
        if reason == "lost":
            raise LeaseLost(f"job {self.job_id}: this attempt lost its lease on the {self.stage} stage")
        if reason == "draining":
            raise WorkerDraining(f"job {self.job_id}: the worker is shutting down")
        if self.remaining() <= 0:
            raise JobDeadlineExceeded(f"job {self.job_id} spent its {self.spec.timeout_s:g} s budget")

    def timings(self) -> Timings:
        elapsed = time.monotonic() - self.started
        values = self.timings_before.model_dump()
        values[self.stage] = values.get(self.stage, 0.0) + elapsed
        return Timings(**values)

    @cached_property
    def policy(self) -> TokenGenerator:
        """Token-in/token-out client bound to this job's sticky backend."""
        return self.policy_factory(self)

    @cached_property
    def tokenizer(self) -> ChatTokenizer:
        return self.tokenizer_factory()
