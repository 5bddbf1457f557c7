"""The same conformance checks on a whole real farm's output (API, Celery workers, Redis, scripted LLM):
jobs sent with only a request `metadata.group_id` come back with traces that every adapter groups and
every trainer checker accepts."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from farm.adapters import flatten, to_nemo_rl, to_skyrl, to_slime_samples, to_verl
from farm.client import FarmClient
from farm.launcher import LocalFarm, WorkerSpec
from farm.models import JobState
from tests.farms import temp_farm
from tests.trainers.test_nemo_rl import collate, flat
from tests.trainers.test_skyrl import check_generator_output
from tests.trainers.test_slime import check_samples
from tests.trainers.test_verl import check_verl_batch

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PROBLEMS = Path(__file__).resolve().parents[2] / "handlers" / "math" / "problems.jsonl"


@pytest.fixture(scope="module")
def farm() -> Iterator[LocalFarm]:
    local = temp_farm(
        "farm-trainers-test-",
        workers=[WorkerSpec("init,eval", concurrency=2), WorkerSpec("run", concurrency=4)],
        llm_args=["--accuracy", "0.5", "--seed", "3"],
    )
    with local.start(timeout_s=90):
        yield local


def test_farm_traces_pass_every_trainer_checker(farm: LocalFarm) -> None:
    rows = [json.loads(line) for line in PROBLEMS.read_text().splitlines() if line.strip()][:2]
    with FarmClient(farm.api_url) as client:
        ids = [
            client.submit(
                {"handler": "math", "question": row["question"], "answer": row["answer"]},
                {"max_tokens": 256},
                metadata={"group_id": f"p{p}"},
            )
            for p, row in enumerate(rows)
            for _ in range(2)
        ]
        results = list(client.as_completed(ids, timeout_s=120))
    assert all(r.state is JobState.done and r.trajectory.traces for r in results)
    traces = [t for r in results for t in r.trajectory.traces]
    assert {t.metadata["group_id"] for t in traces} == {"p0", "p1"}
    assert len({s.group_index for s in flatten(traces)}) == 2  # bare traces still form two groups

    check_verl_batch(to_verl(traces, pad_token_id=0))
    check_generator_output(len(results), to_skyrl(results), step_wise=True)
    check_samples([s.model_dump(mode="json") for s in to_slime_samples(results)])
    data = to_nemo_rl(results)
    collate(data)
    for datum, trace in zip(data, traces, strict=True):
        assert flat(datum["message_log"])[0] == trace.prompt_ids + trace.response_ids
