"""The `swe` handler end to end through the HTTP API: the scripted policy fixes (or breaks) sample
repositories built for the test with real bash and editor calls in real sandboxes; eval scores the
diff in a fresh checkout."""

from __future__ import annotations

import random
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from farm.agent.loop import call_seed
from farm.models.results import JobResult, JobState
from handlers.swe.suite import build_repos
from tests.integration.jobs import assert_token_faithful, submit, wait_state

pytestmark = pytest.mark.integration

ACCURACY = 0.5
"""The farm fixture's scripted policy: `--accuracy 0.5`."""
DECIDING_TURN = 1
"""The swe scripts' paths part at the edit, the policy's second turn."""
TERMINAL = {"done", "failed", "cancelled", "timeout"}


def seed_for(solved: bool, job_id: str) -> int:
    """A sampling seed whose deciding turn takes the success (or the failure) path, as the scripted
    policy draws it: random.Random(per-call seed).random() < accuracy."""
    for seed in range(1000):
        roll = random.Random(call_seed(job_id, seed, DECIDING_TURN)).random()
        if (roll < ACCURACY) == solved:
            return seed
    raise AssertionError("no seed found")


@pytest.fixture(scope="module")
def instances(tmp_path_factory: pytest.TempPathFactory) -> dict[str, dict[str, Any]]:
    """Sample repositories in a directory the workers (same machine) can read."""
    built = build_repos(
        tmp_path_factory.mktemp("swe-integration"),
        names=["textkit", "semver", "pager", "csvlite", "lrucache"],
    )
    return {Path(inst["repo_path"]).name: {k: v for k, v in inst.items() if k != "patch"} for inst in built}


def run_jobs(api: httpx.Client, plan: dict[str, tuple[dict[str, Any], bool]]) -> dict[str, JobResult]:
    ids = {}
    for name, (instance, solved) in plan.items():
        seed = seed_for(solved, "unused")  # the seed is given, so the job id does not enter the draw
        ids[name] = submit(api, instance, sampling_params={"max_tokens": 1024, "seed": seed}, timeout_s=120)
    return {name: wait_state(api, job_id, TERMINAL, timeout_s=90) for name, job_id in ids.items()}


def test_scripted_swe_jobs_solve_and_fail_through_the_api(
    api: httpx.Client, instances: dict[str, dict[str, Any]]
) -> None:
    started = time.monotonic()
    plan = {
        "textkit": (instances["textkit"], True),
        "semver": (instances["semver"], True),
        "pager": (instances["pager"], False),  # the wrong edit breaks a test that passed
        "csvlite": (instances["csvlite"], False),  # the wrong edit leaves the issue unresolved
    }
    cut = {**instances["lrucache"], "max_turns": 2}  # ends right after the edit: no test run, no finish
    plan["lrucache"] = (cut, True)
    results = run_jobs(api, plan)
    for name, result in results.items():
        if name == "lrucache":
            continue
        instance, solved = plan[name]
        assert result.state is JobState.done, (name, result.error)
        assert result.handler == "swe"
        assert result.reward == (1.0 if solved else 0.0), (name, result.metadata)
        assert result.metadata["resolved"] is solved and result.metadata["applied"] is True
        assert set(result.metadata["fail_to_pass"]) == set(instance["FAIL_TO_PASS"])
        assert set(result.metadata["pass_to_pass"]) == set(instance["PASS_TO_PASS"])
        patch = result.artifacts["patch"]
        assert patch.startswith("diff --git") and "+++ b/" in patch, name
        assert result.metadata["finish_reason"] == "finish_tool"
        assert_token_faithful(result)
        trace = result.trajectory.traces[0]
        assert trace.reward == result.reward and trace.metadata["instance_id"] == instance["instance_id"]
        assert trace.metadata["turns"] >= 2 and trace.metadata["tool_calls"] == 3
        roles = [m["role"] for m in trace.response_messages]
        assert roles == ["assistant", "tool"] * 3 + ["assistant"]
        edited = trace.response_messages[3]["content"]
        assert "has been edited" in edited, edited
        assert result.timings.init > 0 and result.timings.run > 0 and result.timings.eval > 0
    # a rollout cut short by max_turns still yields its patch, and eval scores it
    truncated = results["lrucache"]
    assert truncated.state is JobState.done and truncated.metadata["finish_reason"] == "max_turns"
    assert truncated.artifacts["patch"].startswith("diff --git") and truncated.reward == 1.0
    assert truncated.trajectory.traces[0].metadata["turns"] == 2
    # the failures differ: one breaks a PASS_TO_PASS test, the other misses a FAIL_TO_PASS one
    assert not all(results["pager"].metadata["pass_to_pass"].values())
    assert all(results["pager"].metadata["fail_to_pass"].values())
    assert not all(results["csvlite"].metadata["fail_to_pass"].values())
    assert time.monotonic() - started < 90


def test_missing_base_commit_fails_init_with_the_reason(
    api: httpx.Client, instances: dict[str, dict[str, Any]]
) -> None:
    instance = {**instances["textkit"], "base_commit": "0" * 40}
    result = wait_state(api, submit(api, instance, timeout_s=60), TERMINAL, timeout_s=30)
    assert result.state is JobState.failed and result.error is not None
    assert result.error.stage == "init" and result.error.type == "RepositoryError"
    assert f"base_commit {'0' * 40} is not a commit" in result.error.message


@pytest.mark.parametrize(
    ("change", "loc"),
    [
        ({"repo_path": None}, ["body", "instance", "repo_path"]),
        ({"repo_path": "/root"}, ["body", "instance", "repo_path"]),  # outside FARM_HOST_FILE_ROOTS
        ({"FAIL_TO_PASS": "not json"}, ["body", "instance", "FAIL_TO_PASS"]),
        ({"base_commit": "HEAD~1"}, ["body", "instance", "base_commit"]),
    ],
)
def test_bad_swe_instances_are_422_naming_the_field(
    api: httpx.Client, instances: dict[str, dict[str, Any]], change: dict[str, Any], loc: list[str]
) -> None:
    instance = {k: v for k, v in {**instances["textkit"], **change}.items() if v is not None}
    job_id = f"bad-swe-{uuid.uuid4().hex[:8]}"
    response = api.post("/process", json={"instance": instance, "job_id": job_id})
    assert response.status_code == 422, response.text
    assert loc in [err["loc"] for err in response.json()["detail"]]
    assert api.get(f"/jobs/{job_id}").status_code == 404
