"""Job records in Redis: the spec a job was submitted with, its state machine, stage outputs, its result."""

from farm.jobs.spec import JobSpec, session_id
from farm.jobs.store import AsyncJobStore, JobRecord, JobStore

__all__ = ["AsyncJobStore", "JobRecord", "JobSpec", "JobStore", "session_id"]
