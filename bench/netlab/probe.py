"""`probe`: the noop handler that writes down when each attempt of each stage starts and stops, so a
test can check from outside that no stage of a job ever ran twice at once. Every worker process appends
JSON lines to `$FARM_WORKDIR/probe-<pid>.jsonl`; times are CLOCK_MONOTONIC, which every network and pid
namespace of the host shares.

Workers load it with `celery -A bench.netlab.probe_app`; the API with bench/netlab/api_main.py (both must
know the handler: the API validates instances against it)."""

from __future__ import annotations

import json
import os
import threading
import time
import uuid
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from farm.handler.context import JobContext
from farm.handler.protocol import EvalOutput, RunOutput
from farm.handler.registry import register
from handlers.noop import NoopHandler

T = TypeVar("T")
_lock = threading.Lock()


def _log_path() -> Path:
    return Path(os.environ.get("FARM_WORKDIR", "/tmp")) / f"probe-{os.getpid()}.jsonl"


def _write(**fields: Any) -> None:
    line = json.dumps({**fields, "t": time.monotonic()}) + "\n"
    with _lock, _log_path().open("a") as out:
        out.write(line)


def _recorded(ctx: JobContext, stage: str, work: Callable[[], T]) -> T:
    attempt = uuid.uuid4().hex[:12]
    node = os.environ.get("FARM_NODE", "")
    _write(event="start", job=ctx.job_id, stage=stage, attempt=attempt, node=node)
    how = "raised"
    try:
        result = work()
        how = "returned"
        return result
    except BaseException as exc:
        how = type(exc).__name__
        raise
    finally:
        _write(event="end", job=ctx.job_id, stage=stage, attempt=attempt, node=node, how=how)


class ProbeHandler(NoopHandler):
    name = "probe"

    def init(self, ctx: JobContext) -> dict[str, Any]:
        return _recorded(ctx, "init", lambda: super(ProbeHandler, self).init(ctx))

    def run(self, ctx: JobContext, state: dict[str, Any]) -> RunOutput:
        return _recorded(ctx, "run", lambda: super(ProbeHandler, self).run(ctx, state))

    def eval(self, ctx: JobContext, state: dict[str, Any], run: RunOutput) -> EvalOutput:
        return _recorded(ctx, "eval", lambda: super(ProbeHandler, self).eval(ctx, state, run))


# A class of a test module has no entry point (the one way in for a handler package); the deprecated
# register() adds it to this process's registry.
with warnings.catch_warnings(action="ignore", category=DeprecationWarning):
    register(ProbeHandler)


def read_attempts(workdirs: list[Path]) -> dict[str, dict[str, Any]]:
    """attempt id -> {job, stage, node, start, end (None if it never ended: its node was killed), how}."""
    attempts: dict[str, dict[str, Any]] = {}
    for workdir in workdirs:
        for path in workdir.glob("probe-*.jsonl"):
            for line in path.read_text().splitlines():
                try:
                    row = json.loads(line)
                except ValueError:  # a line cut by a kill mid-write
                    continue
                entry = attempts.setdefault(
                    row["attempt"],
                    {"job": row["job"], "stage": row["stage"], "node": row["node"], "end": None},
                )
                if row["event"] == "start":
                    entry["start"] = row["t"]
                else:
                    entry["end"], entry["how"] = row["t"], row.get("how")
    return attempts
