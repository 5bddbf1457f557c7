"""Host files reach a sandbox only from where the operator allows, with the sandbox's rights.

The attack: a task (a dataset row) whose `prepare` asks to upload a host file the worker can read but the
sandbox must not: /etc/shadow, a root-only 0600 env file holding FARM_API_TOKEN, a link or `..` leading out
of an allowed directory. Sent as real jobs through the real API to real workers; before the fix the file's
content came back in the job's output. Now each is refused at submit (422 naming the step, nothing queued),
and a file allowed at submit but made unreadable before the worker reads it fails the job with the reason."""

from __future__ import annotations

import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from containers.identity import host_identity
from farm.launcher import LocalFarm, WorkerSpec
from farm.models.results import JobResult, JobState
from tests.farms import temp_farm
from tests.integration.jobs import wait_task_completed

SECRET = "FARM_API_TOKEN=host-secret-7f3a"


@pytest.fixture(scope="module")
def roots() -> Iterator[Path]:
    """An allowed root (world-traversable, as task data must be for the sandbox's user) and, beside it, a
    directory that is not allowed."""
    base = Path(tempfile.mkdtemp(prefix="farm-host-files-"))
    base.chmod(0o755)
    allowed, outside = base / "allowed", base / "outside"
    for directory in (allowed, outside):
        directory.mkdir(mode=0o755)
        directory.chmod(0o755)
    (allowed / "data.txt").write_text("task data\n")
    (allowed / "data.txt").chmod(0o644)
    (outside / "farm.env").write_text(SECRET + "\n")
    (outside / "farm.env").chmod(0o600)
    (allowed / "private.env").write_text(SECRET + "\n")
    (allowed / "private.env").chmod(0o600)
    (allowed / "escape").symlink_to(outside / "farm.env")
    (allowed / "shadow").symlink_to("/etc/shadow")
    yield allowed


@pytest.fixture(scope="module")
def farm(roots: Path) -> Iterator[LocalFarm]:
    # A Redis of its own (temp_farm's default): on the session's, a farm another module left running
    # would take these jobs with its own FARM_HOST_FILE_ROOTS.
    local = temp_farm(
        "farm-host-files-logs-",
        workers=[WorkerSpec("init,eval", concurrency=2), WorkerSpec("run", concurrency=2)],
        llm_policy=None,
        env={"FARM_HOST_FILE_ROOTS": str(roots)},
    )
    with local.start(timeout_s=90):
        yield local


@pytest.fixture
def api(farm: LocalFarm) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=farm.api_url, timeout=60) as client:
        yield client


def task(upload: str) -> dict[str, Any]:
    return {
        "task_id": f"upload-{uuid.uuid4().hex[:8]}",
        "instruction": "print the uploaded file",
        "timeout_seconds": 120,
        "runtime": {"prepare": [{"upload": upload, "to": "loot"}]},
        "agent": {"harness": "shell", "command": "cat loot; echo; echo END"},
    }


def wait_result(api: httpx.Client, task_id: str) -> JobResult:
    answer = wait_task_completed(api, task_id, 150)
    return JobResult.model_validate(answer["sessions"][0]["result"])


def run(api: httpx.Client, body: dict[str, Any]) -> JobResult:
    submitted = api.post("/rollout/task/submit", json=body)
    assert submitted.status_code == 200, submitted.text
    return wait_result(api, body["task_id"])


ATTACKS = [
    pytest.param(lambda roots: "/etc/shadow", id="etc-shadow"),
    pytest.param(lambda roots: str(roots.parent / "outside" / "farm.env"), id="secret-outside-the-roots"),
    pytest.param(lambda roots: str(roots / ".." / "outside" / "farm.env"), id="dot-dot"),
    pytest.param(lambda roots: str(roots / "escape"), id="link-out-of-the-root"),
    pytest.param(lambda roots: str(roots / "shadow"), id="link-to-etc-shadow"),
    pytest.param(lambda roots: str(roots / "private.env"), id="root-only-file-inside-the-root"),
]


@pytest.mark.parametrize("path", ATTACKS)
def test_an_upload_the_operator_does_not_allow_is_refused_at_submit(
    api: httpx.Client, roots: Path, path: Any
) -> None:
    if "private.env" in path(roots) and host_identity() is None:
        pytest.skip("the farm does not run as root here: the sandbox's user is the farm's own")
    body = task(path(roots))
    answer = api.post("/rollout/task/submit", json=body)
    if answer.status_code == 200:  # taken: show what reached the sandbox (and the job's artifacts)
        output = wait_result(api, body["task_id"]).artifacts.get("output_tail", "")
        leaked = SECRET in output or "root:" in output
        pytest.fail(
            f"accepted; the host file {'reached the job: ' + output[:200] if leaked else 'was not read'}"
        )
    assert answer.status_code == 422, answer.text[:500]
    [error] = answer.json()["detail"]
    assert error["loc"][:3] == ["body", "runtime", "prepare"], error
    assert "prepare[0].upload" in error["msg"]
    assert SECRET not in answer.text and "root:" not in answer.text
    assert api.get(f"/rollout/task/{body['task_id']}").status_code == 404  # nothing queued


def test_an_allowed_file_is_copied(api: httpx.Client, roots: Path) -> None:
    result = run(api, task(str(roots / "data.txt")))
    assert result.state is JobState.done, result.error
    assert "task data" in result.artifacts["output_tail"]


def test_a_file_made_unreadable_after_submit_is_not_read_by_the_worker(
    api: httpx.Client, roots: Path
) -> None:
    """Checked at submit, then swapped for a root-only file: the worker reads as the sandbox's user, so the
    kernel refuses it and the job fails naming the step, never copying the secret."""
    if host_identity() is None:
        pytest.skip("the farm does not run as root here: the sandbox's user is the farm's own")
    late = roots / f"late-{uuid.uuid4().hex[:6]}.env"
    late.write_text("harmless\n")
    late.chmod(0o644)
    body = task(str(late))
    body["runtime"]["prepare"].insert(0, "sleep 3")  # time to swap the file before the upload step
    submitted = api.post("/rollout/task/submit", json=body)
    assert submitted.status_code == 200, submitted.text
    late.chmod(0o600)
    late.write_text(SECRET + "\n")
    result = wait_result(api, body["task_id"])
    assert result.state is JobState.failed
    assert result.error is not None and "runtime.prepare[1]" in result.error.message
    assert SECRET not in result.model_dump_json()
