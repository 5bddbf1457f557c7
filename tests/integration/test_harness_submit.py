"""A harness task's own fields are checked at submit: a mistake is a 422 naming the task's field,
and nothing is queued."""

from __future__ import annotations

import uuid

import httpx
import pytest

pytestmark = pytest.mark.integration


def _task(**fields: object) -> dict[str, object]:
    return {"task_id": f"h-{uuid.uuid4().hex[:8]}", "instruction": "Fix the bug.", **fields}


@pytest.mark.parametrize(
    ("fields", "loc"),
    [
        ({"agent": {"harness": "shell"}}, ["body", "agent", "command"]),
        (
            {"agent": {"harness": "shell", "command": "true"}, "runtime": {"prepare": [{"nonsense": 1}]}},
            ["body", "runtime", "prepare"],
        ),
        (
            {"agent": {"harness": "shell", "command": "true"}, "evaluator": {"strategy": "no-such"}},
            ["body", "evaluator"],
        ),
    ],
)
def test_bad_harness_task_is_refused_naming_the_field(
    api: httpx.Client, fields: dict[str, object], loc: list[str]
) -> None:
    body = _task(**fields)
    response = api.post("/rollout/task/submit", json=body)
    assert response.status_code == 422, response.text
    assert any(e["loc"][: len(loc)] == loc for e in response.json()["detail"]), response.text
    assert api.get(f"/rollout/task/{body['task_id']}").status_code == 404  # nothing queued
