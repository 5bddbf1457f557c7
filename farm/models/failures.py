"""Infrastructure failure classes: a job that ends with one was not scored, through no doing of the policy.

A job's failure class is its `error.type`. The classes below say the farm's machinery failed (a sandbox or
its execution server lost, an evaluator that could not run, inference backends unreachable, workers lost
again and again): such a job ends `failed` with the class and no reward, never `done` with reward 0, and
the trainer adapters and the DAPO consumer leave it out of training and count it. Any other failure
(`timeout`, `cancelled`, a handler's own error) is reported as it is.
"""

from __future__ import annotations

from farm.models.results import JobResult, JobState

INFRASTRUCTURE_FAILURES: frozenset[str] = frozenset(
    {
        "SandboxError",  # containers.errors: the sandbox machinery failed ...
        "SandboxStartError",  # ... a sandbox could not start,
        "ExecServerError",  # ... its execution server could not be reached,
        "RuntimeUnavailable",  # ... or the runtime is missing on the worker
        "EvaluatorUnavailable",  # handlers/harness and handlers/swe: the evaluator could not run
        "BackendUnavailable",  # farm.inference.errors: backends unreachable (after failover)
        "NoBackendAvailable",  # farm.errors: no healthy backend registered before the deadline
        "BadBackendResponse",  # the backend answered without aligned token ids and logprobs
        "WorkerLost",  # tasks/resume.py: a stage lost with its workers more times than retried
    }
)
"""`error.type` values that mean the farm failed, not the policy."""


ROLLOUT_FAILURES: frozenset[str] = frozenset({"SandboxLimitExceeded"})
"""`error.type` values of a failure the rollout itself caused (its sandbox ended for exceeding a resource
limit while it ran). With the `timeout` state (the job's own budget spent), a reward of 0 under every
failure policy: the adapters train on it as 0, the DAPO consumer scores it 0 and never retries it (a retry
would let a policy dodge its zeros by breaking a limit). Failures during an evaluation that the rollout's
state caused end `done` with reward 0 and `metadata.evaluation_refused` instead (docs/CONTRACT.md)."""


def rollout_failure(result: JobResult) -> str | None:
    """The class of a failure the rollout caused (`ROLLOUT_FAILURES`, or "timeout"), or None."""
    if result.state is JobState.timeout:
        return "timeout"
    if result.state is JobState.failed and result.error is not None and result.error.type in ROLLOUT_FAILURES:
        return result.error.type
    return None


def infrastructure_failure(result: JobResult) -> str | None:
    """The class of an infrastructure failure `result` ended with, or None (done, or another failure)."""
    if result.state is JobState.done or result.error is None:
        return None
    return result.error.type if result.error.type in INFRASTRUCTURE_FAILURES else None


__all__ = ["INFRASTRUCTURE_FAILURES", "ROLLOUT_FAILURES", "infrastructure_failure", "rollout_failure"]
