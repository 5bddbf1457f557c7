"""A job's record as read from its hash (farm/keys.py's JobField), and the one builder of a result for
a job that ends outside its handler's own final_result."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Protocol

from farm.jobs.spec import JobSpec
from farm.keys import JobField
from farm.models.results import STAGES, JobResult, JobState, StageError, Timings
from farm.text import as_text as _s


@dataclass
class JobPeek:
    """A job's state and, once it has ended, its result exactly as stored (JSON)."""

    state: JobState
    result_json: str | None

    @property
    def terminal(self) -> bool:
        return self.state.terminal


@dataclass
class JobRecord:
    """A parsed view of a job's hash."""

    spec: JobSpec
    state: JobState
    task_ids: dict[str, str]
    fields: dict[str, str]

    @classmethod
    def parse(cls, raw: dict[Any, Any]) -> JobRecord | None:
        if not raw:
            return None
        fields = {_s(k): _s(v) for k, v in raw.items()}
        if JobField.SPEC not in fields:
            return None
        return cls(
            spec=JobSpec.model_validate_json(fields[JobField.SPEC]),
            state=JobState(fields[JobField.STATE]),
            task_ids=json.loads(fields.get(JobField.TASK_IDS, "{}")),
            fields=fields,
        )

    @property
    def job_id(self) -> str:
        return self.spec.job_id

    @property
    def result(self) -> JobResult | None:
        raw = self.fields.get(JobField.RESULT)
        return JobResult.model_validate_json(raw) if raw else None

    @property
    def node(self) -> str | None:
        return self.fields.get(JobField.NODE)

    @property
    def metadata(self) -> dict[str, Any]:
        return self.spec.metadata

    def timings(self) -> Timings:
        values = {stage: float(self.fields.get(JobField.stage_time(stage), 0.0)) for stage in STAGES}
        return Timings(queued=float(self.fields.get(JobField.T_QUEUED, 0.0)), **values)

    def stage_done(self, stage: str) -> bool:
        return self.fields.get(JobField.stage_done(stage)) == "1"

    def output(self, name: str) -> dict[str, Any] | None:
        raw = self.fields.get(name)
        return json.loads(raw) if raw else None

    def snapshot_json(self) -> str:
        """snapshot() as JSON; a stored result is returned as stored (no parse, no re-encode: results
        carry every token id of every trace)."""
        return self.fields.get(JobField.RESULT) or self.snapshot().model_dump_json()

    def snapshot(self) -> JobResult:
        """The result if terminal, else a progress view with the state it is in now."""
        done = self.result
        if done is not None:
            return done
        return terminal_result(self, self.state)


class ResultSource(Protocol):
    """What a terminal result is built from: a stored record, or a running stage's context."""

    @property
    def spec(self) -> JobSpec: ...

    @property
    def metadata(self) -> dict[str, Any]: ...

    def timings(self) -> Timings: ...


def terminal_result(
    source: ResultSource, state: JobState, error: StageError | None = None, **extra: Any
) -> JobResult:
    """The one builder of a result for a job that ends outside the handler's own final_result: a
    failed stage, a cancellation, a spent budget, a lost worker."""
    return JobResult(
        job_id=source.spec.job_id,
        state=state,
        handler=source.spec.handler,
        timings=source.timings(),
        error=error,
        metadata=source.metadata,
        **extra,
    )
