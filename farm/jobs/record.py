"""A job's record as read from its hash, and the one builder of a result for a job that ends outside its
handler's own final_result. Each field's encoding is written here once (the names: farm/keys.py's
JobField); the rest of the farm reads and writes records through these objects, never by field name."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Protocol, cast

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


def _json(raw: str | None) -> dict[str, Any] | None:
    return cast(dict[str, Any], json.loads(raw)) if raw else None


@dataclass(frozen=True)
class StageHandoff:
    """What a stage that ended well records for the next: init its node and the state it made, run its
    node and its output (RunOutput as JSON data)."""

    node: str
    init_state: dict[str, Any] | None = None
    run_output: dict[str, Any] | None = None

    def fields(self) -> dict[str, str]:
        if self.run_output is not None:
            return {JobField.RUN_NODE: self.node, JobField.RUN_OUTPUT: json.dumps(self.run_output)}
        return {JobField.NODE: self.node, JobField.INIT_STATE: json.dumps(self.init_state or {})}


@dataclass
class JobFields:
    """Typed reads of a job's hash, or of the part of it one read fetched (absent fields read as unset)."""

    fields: dict[str, str]
    """The hash as stored (this module and tests read it; everyone else the typed reads)."""

    @property
    def over(self) -> bool:  # gone or ended
        state = self.fields.get(JobField.STATE)
        return state is None or JobState(state).terminal

    @property
    def lease_expires(self) -> float:  # 0: no stage ever held it
        return float(self.fields.get(JobField.LEASE_EXPIRES) or 0)

    @property
    def leased(self) -> bool:  # a stage holds the job's lease now
        return bool(self.fields.get(JobField.LEASE_TOKEN))

    @property
    def node(self) -> str | None:
        """The node whose init made the job's sandbox (its run goes there)."""
        return self.fields.get(JobField.NODE)

    @property
    def init_state(self) -> dict[str, Any] | None:
        """What init made (handed to run and teardown), once init handed off."""
        return _json(self.fields.get(JobField.INIT_STATE))

    @property
    def sandbox_id(self) -> str | None:
        """The sandbox init made: handlers keep its handle in init's state under `sandbox`
        (handlers/sandboxing.py)."""
        try:
            return ((self.init_state or {}).get("sandbox") or {}).get("id")
        except ValueError:
            return None

    @property
    def run_output(self) -> dict[str, Any] | None:
        """The run's output (RunOutput as JSON data), once run handed off."""
        return _json(self.fields.get(JobField.RUN_OUTPUT))

    @property
    def backend_pinned(self) -> bool:
        """Whether the job has used a backend (and holds a pin to release when it ends)."""
        return self.fields.get(JobField.BACKEND_PINNED) == "1"

    @property
    def callback_url(self) -> str | None:
        return self.fields.get(JobField.CALLBACK_URL) or None

    def timings(self) -> Timings:
        values = {stage: float(self.fields.get(JobField.stage_time(stage), 0.0)) for stage in STAGES}
        return Timings(queued=float(self.fields.get(JobField.T_QUEUED, 0.0)), **values)

    def stage_done(self, stage: str) -> bool:
        return self.fields.get(JobField.stage_done(stage)) == "1"


@dataclass
class JobRecord(JobFields):
    """A parsed view of a job's hash."""

    spec: JobSpec
    state: JobState
    task_ids: dict[str, str]

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
    def metadata(self) -> dict[str, Any]:
        return self.spec.metadata

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
