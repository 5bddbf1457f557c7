"""A JobContext built outside a worker, for calling a handler's stages or the agent loop in-process (a handler
author's own tests, the farm's tests and benches)."""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

from farm.handler.context import JobContext, TokenGenerator
from farm.jobs.spec import JobSpec
from farm.models.results import Timings

if TYPE_CHECKING:
    from pydantic import BaseModel

    from farm.chat.tokenizer import ChatTokenizer


def job_context(
    spec: JobSpec,
    instance: BaseModel,
    *,
    stage: str = "run",
    node: str = "n",
    workdir: Path = Path("/nonexistent"),
    policy: TokenGenerator | None = None,
    tokenizer: Callable[[], ChatTokenizer] | None = None,
) -> JobContext:
    """`spec`'s context in `stage`: the job's whole `timeout_s` ahead, no time spent before it, never
    interrupted. A stage that asks for a model gets `policy`, or for a tokenizer `tokenizer()`; left
    None, it gets None (for stages that need neither)."""
    return JobContext(
        spec=spec,
        instance=instance,
        stage=stage,
        node=node,
        workdir=workdir,
        deadline=time.monotonic() + spec.timeout_s,
        timings_before=Timings(),
        interruption=lambda: None,
        policy_factory=lambda ctx: policy,  # type: ignore[arg-type,return-value]
        tokenizer_factory=tokenizer or (lambda: None),  # type: ignore[arg-type,return-value]
    )
