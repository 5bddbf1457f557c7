"""A weak policy does not break the farm: with the `tiny` reference model (random weights, garbage
output, real forward passes and logprobs) 50 rollouts of every task handler reach a terminal state
with a well-formed result and a recorded reason: no crash, no stuck job."""

from __future__ import annotations

import json
import os
import uuid
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from farm.launcher import LocalFarm
from farm.models.results import JobResult, JobState, Trace
from tests.farms import stage_workers, temp_farm
from tests.waiting import wait_until

# Slow: a farm of its own for the torch policy (about 35 s). With `[test]` alone it skips; CI runs it in
# the slow step and in the model extra's fresh venv (ops/check_extras.py).
pytestmark = [pytest.mark.integration, pytest.mark.slow]
pytest.importorskip("torch", reason="the tiny policy needs the model extra: pip install -e '.[model]'")

ROLLOUTS = int(os.environ.get("FARM_TINY_ROLLOUTS", "50"))
HANDLERS = Path(__file__).resolve().parents[2] / "handlers"
# Short turns keep the test quick; the loop's terminal conditions are what is being exercised.
SAMPLING = {"max_tokens": 48, "temperature": 1.0}


def _first_jsonl(path: Path) -> dict[str, Any]:
    return json.loads(path.read_text().splitlines()[0])


def math_instance(_: Path) -> dict[str, Any]:
    row = _first_jsonl(HANDLERS / "math" / "problems.jsonl")
    return {"handler": "math", "question": row["question"], "answer": row["answer"], "max_turns": 3}


def code_instance(_: Path) -> dict[str, Any]:
    row = _first_jsonl(HANDLERS / "code" / "problems.jsonl")
    return {**{k: v for k, v in row.items() if k != "id"}, "handler": "code", "max_turns": 3}


def swe_instance(scratch: Path) -> dict[str, Any]:
    from handlers.swe.suite import build_repos

    return {**build_repos(scratch / "swe-repos")[0], "handler": "swe", "max_turns": 3}


INSTANCES = {"math": math_instance, "code": code_instance, "swe": swe_instance}


def assert_trace_aligned(trace: Trace) -> None:
    n = len(trace.response_ids)
    assert len(trace.loss_mask) == n == len(trace.response_logprobs)
    assert all(lp <= 0.0 for lp, m in zip(trace.response_logprobs, trace.loss_mask, strict=True) if m == 1)
    assert all(lp == 0.0 for lp, m in zip(trace.response_logprobs, trace.loss_mask, strict=True) if m == 0)


@pytest.fixture(scope="module")
def tiny_farm() -> Iterator[LocalFarm]:
    # swe repositories are built in each test's tmp_path: an allowed root for the farms of this session
    # (tests/conftest.py `host_file_roots`; handlers/host_files.py)
    farm = temp_farm("farm-tiny-", workers=stage_workers(4, 8), llm_policy="tiny", llm_args=["--seed", "3"])
    with farm.start(timeout_s=120):
        yield farm


@pytest.mark.parametrize("handler", sorted(INSTANCES))
def test_garbage_policy_rollouts_all_end_well_formed(
    tiny_farm: LocalFarm, handler: str, tmp_path: Path
) -> None:
    instance = INSTANCES[handler](tmp_path)
    task_id = f"tiny-{handler}-{uuid.uuid4().hex[:6]}"
    with httpx.Client(base_url=tiny_farm.api_url, timeout=60) as api:
        body = {
            "task_id": task_id,
            "instance": instance,
            "num_samples": ROLLOUTS,
            "sampling_params": SAMPLING,
            "timeout_seconds": 120,
        }
        submitted = api.post("/rollout/task/submit", json=body)
        assert submitted.status_code == 200, submitted.text
        status = wait_until(
            lambda: api.get(f"/rollout/task/{task_id}").json(),
            240,
            accept=lambda status: status["state"] == "completed",
            interval_s=0.2,
            what=f"task {task_id} completed",
        )
        results = [JobResult.model_validate(s["result"]) for s in status["sessions"]]

    assert len(results) == ROLLOUTS
    reasons: Counter[str] = Counter()
    for result in results:
        assert result.state.terminal
        if result.state is JobState.done:
            reason = result.metadata.get("finish_reason")
            assert reason, result.metadata
            assert result.reward is not None
            assert result.trajectory and result.trajectory.traces
            for trace in result.trajectory.traces:
                assert_trace_aligned(trace)
        else:
            assert result.error is not None, result
            reason = f"{result.state.value}: {result.error.type}"
        reasons[reason] += 1
    stages = {
        k: round(sum(getattr(r.timings, k) for r in results) / len(results), 2)
        for k in ("queued", "init", "run", "eval")
    }
    print(f"\n{handler}: {dict(reasons)} mean stage s: {stages}")
    # Garbage output must not be mistaken for a failure of the farm: the episodes end, they are scored.
    assert sum(1 for r in results if r.state is JobState.done) >= ROLLOUTS * 0.9, reasons
