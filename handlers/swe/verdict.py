"""What evaluating a patch concludes (shared by the farm's own evaluator and the SWE-bench harness)."""

from __future__ import annotations

from pydantic import BaseModel, Field

LOG_TAIL_CHARS = 4000


class PatchVerdict(BaseModel):
    instance_id: str
    reward: float
    resolved: bool = False
    applied: bool = False
    fail_to_pass: dict[str, bool] = Field(default_factory=dict)
    pass_to_pass: dict[str, bool] = Field(default_factory=dict)
    outcomes: dict[str, str] = Field(default_factory=dict)
    """pytest's status per listed test (PASSED, FAILED, ERROR, XFAIL, XPASS, SKIPPED) or MISSING."""
    log: str = ""
    """Tail of the apply and test output."""
    timed_out: bool = False
    refused_paths: list[str] = Field(default_factory=list)
    """Implicitly loaded files (conftest.py, sitecustomize.py, ...) the patch changed: not run, reward 0."""
    evaluation_refused: str | None = None
    """The patch left the tree in a state the evaluation cannot run on (e.g. a link where the test files
    go, so the instance's test patch cannot apply though it applies at the base): the patch's doing, 0."""
    evaluator: str = "farm"
    duration_s: float = 0.0
