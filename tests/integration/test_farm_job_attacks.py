"""Attacks from inside real farm jobs (the attack suite's farm-level part, beside tests/security/ so it shares
the integration suite's farm): a harness job whose agent goes after the farm itself through the
only door it has (its gateway relay), the farm's Redis, and the worker's secrets."""

from __future__ import annotations

import json
import urllib.parse

import httpx
import pytest

from farm.launcher import LocalFarm
from farm.models.results import JobState
from tests.integration.test_harness_shell import submit_task, task_id, wait_task

pytestmark = pytest.mark.integration

ATTACKER = r"""
import json, os, socket, urllib.request, urllib.error
base = os.environ["FARM_GATEWAY_BASE_URL"]
origin = base.split("/gateway/")[0]
session_path = base[len(origin):]
def post(url, body=b"{}"):
    request = urllib.request.Request(url, data=body, headers={"content-type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=5) as answer:
            return answer.status
    except urllib.error.HTTPError as error:
        return error.code
    except Exception as error:
        return type(error).__name__
out = {
    "stop": post(origin + "/stop"),
    "add_backend": post(origin + "/add_llm_server", b'{"address": "http://10.0.0.1:1/v1"}'),
    "self_reward": post(base + "/reward", b'{"reward": 1.0}'),
    "export": post(base + "/export", b'{"builder": "per_request"}'),
    "dotdot": post(base + "/../x/v1/chat/completions"),
    "other_session": post(origin + "/gateway/sessions/someone-else/v1/chat/completions"),
}
try:
    socket.create_connection(("127.0.0.1", REDIS_PORT), 3)
    out["redis"] = "connected"
except OSError as error:
    out["redis"] = type(error).__name__
secrets = []
for pid in os.listdir("/proc"):
    if pid.isdigit():
        try:
            secrets.append(open(f"/proc/{pid}/environ", "rb").read())
        except OSError:
            pass
out["secret_seen"] = any(b"FARM_API_TOKEN" in s or b"FARM_REDIS_URL" in s for s in secrets)
out["env"] = sorted(k for k in os.environ if k.startswith("FARM_"))
print("ATTACK " + json.dumps(out))
"""


def test_a_harness_job_cannot_reach_the_farm_its_redis_or_its_secrets(
    api: httpx.Client,
    farm: LocalFarm,
) -> None:
    redis_port = urllib.parse.urlsplit(farm.redis_url).port
    task = task_id("attack")
    submit_task(
        api,
        task_id=task,
        runtime={
            "prepare": [{"write": "attack.py", "content": ATTACKER.replace("REDIS_PORT", str(redis_port))}]
        },
        agent={"harness": "shell", "command": "python attack.py"},
    )
    result = wait_task(api, task, timeout_s=90)
    assert result.state is JobState.done, result.error
    line = next(x for x in result.artifacts["output_tail"].splitlines() if x.startswith("ATTACK "))
    seen = json.loads(line.removeprefix("ATTACK "))
    for route in ("stop", "add_backend", "self_reward", "export", "dotdot", "other_session"):
        assert seen[route] == 403, (route, seen)
    assert seen["redis"] != "connected"
    assert seen["secret_seen"] is False
    assert not [k for k in seen["env"] if "TOKEN" in k or "REDIS" in k]
    # the farm is still serving, and no backend was added
    assert api.get("/status").status_code == 200
    assert all("10.0.0.1" not in b["address"] for b in api.get("/llm_servers").json())


@pytest.mark.parametrize(
    "evaluator",
    [
        {"strategy": "test_on_output", "config": {"command": "grep -qx solved answer.txt"}},
        {"strategy": "session_completed"},
    ],
    ids=["test-in-place", "session-completed"],
)
@pytest.mark.parametrize(
    "kill",
    ["kill -9 $PPID; sleep 5", "(sleep 0.3; kill -9 $PPID) >/dev/null 2>&1 & exit 0"],
    ids=["while-running", "after-exit"],
)
def test_a_rollout_that_kills_its_own_sandbox_is_scored_not_excused(
    api: httpx.Client, evaluator: dict, kill: str
) -> None:
    """A failing rollout that kills its sandbox's execution server must not pass as an infrastructure
    failure: the trainer would leave it out, so a policy could learn to dodge its zeros that way. It is
    scored 0 and flagged with what happened."""
    task = task_id("kill-own-sandbox")
    submit_task(
        api,
        task_id=task,
        runtime={"prepare": [{"git_init": True}]},
        # $PPID is the execution server: bash -c runs under it
        agent={"harness": "shell", "command": f"echo unsolved > answer.txt; {kill}"},
        evaluator=evaluator,
    )
    result = wait_task(api, task, timeout_s=90)
    assert result.state is JobState.done, result.error
    assert result.reward == 0.0
    if kill.startswith("kill"):  # a killer left behind may lose its race with the evaluation's quiesce
        assert "execution server" in result.metadata["sandbox_lost"], result.metadata
