"""Issue 34: a rollout raising, dodging or leaking a reward through the state it leaves its evaluator.

Real jobs through the real API on real workers (a shell harness; no model call): the task is a prepared
buggy `calc.py`, the evaluator `test_on_output` with a hidden `files` `{"test_hidden.py": ...}` run as
`python3 test_hidden.py`. An honest run scores 0 (its control beside every attack); a fix scores 1. Each
attack runs in-place (with and without a git repository) and in a fresh runtime (patch or frozen copy).

Every case must end `done`, with a reward no higher than its control, never an infrastructure failure
class (which a trainer drops), and never with a host file in its output. On main: the link forged 1.0
(in-place and fresh + git_init); the directory, fifo, read-only link, `chmod 000 /workspace`,
`chmod 000 /tmp` and the deep tree ended `failed` / `EvaluatorUnavailable`.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from farm.launcher import LocalFarm, WorkerSpec
from farm.models.failures import infrastructure_failure
from farm.models.results import JobResult, JobState
from tests.farms import temp_farm
from tests.integration.jobs import wait_task_completed

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CALC = "def add(a, b):\n    return a - b\n"
HIDDEN_TEST = "from calc import add\n\nassert add(2, 3) == 5, 'not solved'\nprint('solved')\n"
FIX = "sed -i 's/a - b/a + b/' calc.py"
DEEP_TREE = "for i in $(seq 1100); do mkdir d && cd d || exit 1; done"
# A daemon left running that keeps swapping a file/link pair and a directory/link pair, and writing new
# files, while the evaluation runs and (fresh mode) the workspace is carried to the fresh runtime.
RACING_DAEMON = (
    "mkdir -p b && head -c 4000000 /dev/zero > b/big.bin && echo planted > b/canary.txt; "
    "setsid nohup sh -c 'while :; do ln -sfn {secret_dir} b.link; mv -T b b.real; mv -T b.link b; "
    "mv -T b b.link; mv -T b.real b; echo x > f.$$; ln -sf /dev/null f.$$; rm -f f.$$; done' "
    ">/dev/null 2>&1 </dev/null & sleep 0.3"
)

ATTACKS = {
    "honest": "true",
    "link-to-dev-null": "ln -s /dev/null test_hidden.py",
    "directory": "mkdir test_hidden.py",
    "fifo": "mkfifo test_hidden.py",
    "link-to-read-only-file": "ln -s /etc/passwd test_hidden.py",
    "chmod-000-workspace": "chmod 000 /workspace",
    "chmod-000-tmp": "chmod 000 /tmp",
    "deep-tree": DEEP_TREE,
    "racing-daemon": RACING_DAEMON,
}
MODES = {
    "in-place": {"fresh": False, "git": False},
    "in-place-git": {"fresh": False, "git": True},
    "fresh-git": {"fresh": True, "git": True},
    "fresh-copy": {"fresh": True, "git": False},
}
HOST_SECRET = "HOST-ROOT-ONLY-5150"


@pytest.fixture(scope="module")
def secret_dir() -> Iterator[Path]:
    """A root-only directory on the host holding a root-only file: no job's output may ever show it."""
    directory = Path(tempfile.mkdtemp(prefix="farm-host-secret-"))
    directory.chmod(0o700)
    (directory / "canary.txt").write_text(HOST_SECRET + "\n")
    (directory / "canary.txt").chmod(0o600)
    yield directory
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture(scope="module")
def farm() -> Iterator[LocalFarm]:
    local = temp_farm(
        "farm-hostile-logs-",
        workers=[WorkerSpec("init,eval", concurrency=2), WorkerSpec("run", concurrency=3)],
        llm_policy=None,
    )
    with local.start(timeout_s=90):
        yield local


@pytest.fixture(scope="module")
def api(farm: LocalFarm) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=farm.api_url, timeout=60) as client:
        yield client


def body(command: str, mode: dict[str, bool], files: bool = True) -> dict[str, Any]:
    prepare: list[Any] = [{"write": "calc.py", "content": CALC}]
    if mode["git"]:
        prepare.append({"git_init": True})
    config: dict[str, Any] = {"command": "python3 test_hidden.py", "timeout_s": 60, "fresh": mode["fresh"]}
    if files:
        config["files"] = {"test_hidden.py": HIDDEN_TEST}
    return {
        "task_id": f"hostile-{uuid.uuid4().hex[:8]}",
        "instruction": "fix calc.add",
        "timeout_seconds": 150,
        "runtime": {"prepare": prepare},
        "agent": {"harness": "shell", "command": command},
        "evaluator": {"strategy": "test_on_output", "config": config},
    }


def submit(api: httpx.Client, payload: dict[str, Any]) -> str:
    answer = api.post("/rollout/task/submit", json=payload)
    assert answer.status_code == 200, answer.text
    return str(payload["task_id"])


def result_of(api: httpx.Client, task_id: str) -> JobResult:
    answer = wait_task_completed(api, task_id, 240)
    return JobResult.model_validate(answer["sessions"][0]["result"])


def run_all(api: httpx.Client, payloads: dict[str, dict[str, Any]]) -> dict[str, JobResult]:
    """Submit every job first (the farm runs them concurrently), then collect."""
    ids = {name: submit(api, payload) for name, payload in payloads.items()}
    return {name: result_of(api, task_id) for name, task_id in ids.items()}


def assert_held(name: str, result: JobResult, control: JobResult) -> None:
    seen = json.dumps(result.model_dump(mode="json"))
    assert HOST_SECRET not in seen, f"{name}: a root-only host file reached the result"
    assert infrastructure_failure(result) is None, f"{name}: {result.error}"
    assert result.state is JobState.done, f"{name}: {result.state} {result.error}"
    assert (result.reward or 0.0) <= (control.reward or 0.0), f"{name}: {result.reward} {result.artifacts}"


@pytest.mark.parametrize("mode", list(MODES), ids=list(MODES))
def test_no_workspace_state_raises_or_dodges_the_reward(
    api: httpx.Client, secret_dir: Path, mode: str
) -> None:
    payloads = {
        name: body(command.replace("{secret_dir}", str(secret_dir)), MODES[mode])
        for name, command in ATTACKS.items()
    }
    payloads["fixed"] = body(FIX, MODES[mode])
    results = run_all(api, payloads)
    control, fixed = results.pop("honest"), results.pop("fixed")
    assert control.state is JobState.done and control.reward == 0.0, control
    assert control.metadata["tests_passed"] is False and "not solved" in control.artifacts["test"]["output"]
    assert fixed.state is JobState.done and fixed.reward == 1.0, fixed.artifacts
    for name, result in results.items():
        assert_held(name, result, control)
    refused = ["chmod-000-workspace", "deep-tree"]
    if not MODES[mode]["fresh"]:  # a fresh runtime has a /tmp of its own
        refused.append("chmod-000-tmp")
    if mode != "fresh-git":  # git carries no empty directory: the fresh runtime gets the hidden test
        refused.append("directory")
    for name in refused:
        assert results[name].metadata.get("evaluation_refused"), (name, results[name].metadata)
    for name, result in results.items():
        print(f"{mode} {name}: reward {result.reward}, refused: {result.metadata.get('evaluation_refused')}")


def test_the_evaluation_needs_no_hidden_files_to_be_told_apart(api: httpx.Client) -> None:
    """`chmod 000 /workspace` without `files`: still the rollout's (done, 0, flagged), not the farm's."""
    mode = MODES["in-place"]
    payloads = {
        "honest": body("true", mode, files=False),
        "chmod": body("chmod 000 /workspace", mode, files=False),
    }
    results = run_all(api, payloads)
    assert_held("chmod", results["chmod"], results["honest"])
    assert results["chmod"].metadata.get("evaluation_refused")


def test_host_secret_is_really_root_only(secret_dir: Path) -> None:
    assert os.stat(secret_dir).st_mode & 0o077 == 0


def test_the_demo_task_pays_nothing_for_writing_its_test(api: httpx.Client) -> None:
    """Issue 34 item 9, as the demo submits it (fresh runtime, git patch): the rollout's own test_calc.py
    is replaced by the evaluator's."""
    from farm.demo import harness_task

    payloads = {
        name: harness_task(f"demo-{name}-{uuid.uuid4().hex[:6]}", "shell", command, 1)
        for name, command in {
            "forged": """echo 'print("ok")' > test_calc.py""",
            "fixed": FIX,
        }.items()
    }
    results = run_all(api, payloads)
    assert results["fixed"].state is JobState.done and results["fixed"].reward == 1.0, results["fixed"]
    assert results["forged"].state is JobState.done and results["forged"].reward == 0.0, results["forged"]
