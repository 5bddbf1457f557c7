"""Handlers' sandbox lifecycle: init starts one, run re-attaches (another process on the same node),
teardown stops it. Its handle is kept in the job's init state under `sandbox`."""

from __future__ import annotations

import contextlib
import logging
from typing import Any

from containers import Sandbox, SandboxSpec, attach, get_runtime, warm_pool
from farm.handler.context import JobContext
from farm.identity import FARM_LABEL, current_farm_id

log = logging.getLogger(__name__)
SCORING_BUFFER_S = 120.0
"""A sandbox outlives the job's remaining budget by this much, so scoring never meets a dead one."""


def sandbox_spec(ctx: JobContext, **overrides: Any) -> SandboxSpec:
    runtime = ctx.spec.runtime
    values: dict[str, Any] = {
        "image": runtime.get("image"),
        "network": bool(runtime.get("network", False)),
        # It must survive the init worker: the run stage may run in another process.
        "die_with_parent": False,
        "ttl_s": max(ctx.remaining(), 1.0) + SCORING_BUFFER_S,
        # tasks/orphans.py stops a sandbox whose job no longer needs it (its init worker was killed).
        "labels": {"job_id": ctx.job_id, "stage": ctx.stage, FARM_LABEL: current_farm_id()},
    }
    if runtime.get("workdir"):
        values["workdir"] = runtime["workdir"]
    return SandboxSpec(**(values | overrides))


def start_sandbox(ctx: JobContext, **overrides: Any) -> dict[str, Any]:
    """Starts the job's sandbox, or claims one started ahead for the same spec from this process's warm
    pool (containers/warm_pool.py: handed over as if just started for this job); returns its handle for
    the init state."""
    backend = ctx.spec.runtime.get("backend", "local")
    spec = sandbox_spec(ctx, **overrides)
    pool = warm_pool.installed() if backend == "local" else None
    claimed = pool.claim(spec) if pool is not None else None
    if claimed is not None:
        return claimed.handle()
    return get_runtime(backend).start(spec).handle()


def open_sandbox(state: dict[str, Any]) -> Sandbox:
    return attach(state["sandbox"])


def stop_sandbox(state: dict[str, Any]) -> None:
    handle = state.get("sandbox")
    if not handle:
        return
    with contextlib.suppress(Exception):
        attach(handle).stop()
