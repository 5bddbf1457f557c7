"""The evaluation's own inputs never pass through the rollout's paths (issue 34 items 1, 2, 4), in-process
and fast: `test_on_output`'s collect and score on a real local sandbox the "rollout" left in a hostile
state. The same attacks as real jobs, in every mode: tests/security/test_hostile_workspace_jobs.py (slow).

Each case scores at most its control (0: the hidden test fails on the buggy code), never raises an
infrastructure class, and where the state makes the evaluation impossible says so in
`evaluation_refused`."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from containers.local import LocalRuntime
from containers.sandbox import Sandbox
from containers.spec import SandboxSpec
from farm.handler.protocol import RunOutput
from handlers.evaluation_guard import EvaluatorUnavailable, implicit_files
from handlers.harness.evaluators import OutputTestConfig, OutputTestEvaluator, RunFacts
from tests.security.test_evaluation_tampering import context

CALC = "def add(a, b):\n    return a - b\n"
HIDDEN = "from calc import add\n\nassert add(2, 3) == 5, 'not solved'\nprint('solved')\n"
CONFIG = OutputTestConfig(command="python3 test_hidden.py", files={"test_hidden.py": HIDDEN}, timeout_s=60)


@pytest.fixture
def rollout(runtime: LocalRuntime) -> Iterator[Sandbox]:
    with runtime.start(SandboxSpec()) as sandbox:
        assert sandbox.exec("cat > calc.py", stdin=CALC).exit_code == 0
        yield sandbox


def evaluate(
    sandbox: Sandbox, attack: str, config: OutputTestConfig = CONFIG
) -> tuple[float, dict[str, Any]]:
    before = implicit_files(sandbox)
    sandbox.exec(attack, timeout=30)
    evaluator, ctx = OutputTestEvaluator(), context()
    artifacts = evaluator.collect(ctx, RunFacts(sandbox, None, 0, None, before), config)
    scored = evaluator.score(ctx, RunOutput(artifacts=artifacts), config)
    return scored.reward, {**artifacts["test"], **scored.metadata}


def test_control_scores_zero_and_a_fix_one(rollout: Sandbox) -> None:
    reward, test = evaluate(rollout, "true")
    assert reward == 0.0 and "not solved" in test["output"] and "evaluation_refused" not in test
    reward, test = evaluate(rollout, "sed -i 's/a - b/a + b/' calc.py")
    assert reward == 1.0 and "solved" in test["output"]


@pytest.mark.parametrize(
    "attack",
    [
        "ln -s /dev/null test_hidden.py",
        "ln -s /etc/passwd test_hidden.py",
        "mkfifo test_hidden.py",
        "printf 'print(1)' > test_hidden.py && chmod 444 test_hidden.py",
    ],
    ids=["link-dev-null", "link-read-only", "fifo", "read-only-file"],
)
def test_what_the_rollout_left_at_the_hidden_name_is_replaced(rollout: Sandbox, attack: str) -> None:
    reward, test = evaluate(rollout, attack)
    assert reward == 0.0 and "not solved" in test["output"], test
    assert rollout.exec("test -f test_hidden.py && ! test -L test_hidden.py").exit_code == 0


@pytest.mark.parametrize(
    ("attack", "why"),
    [
        ("mkdir test_hidden.py", "is a directory"),
        ("chmod 000 /tmp", "/tmp"),
        ("chmod 000 /workspace", "unreadable"),
    ],
    ids=["directory", "chmod-tmp", "chmod-workspace"],
)
def test_a_state_that_makes_the_evaluation_impossible_is_a_flagged_zero(
    rollout: Sandbox, attack: str, why: str
) -> None:
    reward, test = evaluate(rollout, attack)
    assert reward == 0.0 and why in test["evaluation_refused"], test


def test_a_link_where_a_parent_directory_goes_is_not_followed(rollout: Sandbox) -> None:
    config = OutputTestConfig(command="python3 tests/test_hidden.py", files={"tests/test_hidden.py": HIDDEN})
    reward, test = evaluate(rollout, "ln -s /tmp tests", config)
    assert reward == 0.0 and "tests is not a directory" in test["evaluation_refused"], test
    assert rollout.exec("test -e /tmp/test_hidden.py").exit_code != 0


def test_a_daemon_left_running_is_stopped_before_anything_is_read(rollout: Sandbox) -> None:
    daemon = (
        "setsid nohup sh -c 'while :; do ln -sfn /dev/null test_hidden.py.new; mv -f test_hidden.py.new "
        "test_hidden.py; done' >/dev/null 2>&1 </dev/null & sleep 0.2"
    )
    reward, test = evaluate(rollout, daemon)
    assert reward == 0.0 and "not solved" in test["output"], test
    running = rollout.exec("cat /proc/[0-9]*/cmdline | tr '\\0' ' '").stdout
    assert "while" not in running, running


def test_a_planted_bytecode_cache_is_never_read(rollout: Sandbox) -> None:
    """A `__pycache__/calc.cpython-*.pyc` forging `add` with the source's mtime and size: the evaluation's
    bytecode cache is its own directory (PYTHONPYCACHEPREFIX)."""
    plant = (
        "cp calc.py real.py && sed -i 's/a - b/a + b/' calc.py && python3 -c 'import calc' && "
        "touch -r real.py calc.py && cp real.py calc.py && touch -r real.py calc.py "
        "&& python3 -c 'import calc; print(calc.add(2, 3))'"
    )
    assert rollout.exec(plant).stdout.strip() == "5"  # the plant works for the rollout: stale bytecode
    reward, test = evaluate(rollout, "true")
    assert reward == 0.0 and "not solved" in test["output"], test


def test_the_farms_own_failure_is_still_infrastructure(rollout: Sandbox) -> None:
    evaluator, ctx = OutputTestEvaluator(), context()
    fresh = OutputTestConfig(command="true", fresh=True)
    artifacts = evaluator.collect(ctx, RunFacts(rollout, None, 0, None, None), fresh)
    with pytest.raises(EvaluatorUnavailable, match="never started"):
        evaluator.score(ctx, RunOutput(artifacts=artifacts), fresh)


def test_hidden_file_names_stay_inside_the_workdir() -> None:
    for name in ("../x.py", "/etc/x.py", "a/../../x.py", "."):
        with pytest.raises(ValueError, match="relative path"):
            OutputTestConfig(command="true", files={name: ""})


def test_the_demo_task_scores_its_own_test_not_the_rollouts(rollout: Sandbox) -> None:
    """Issue 34 item 9: the demo's harness task pays 0 for `echo 'print("ok")' > test_calc.py`."""
    from farm.demo import HARNESS_FILES, harness_task

    task = harness_task("demo-item-9", "shell", "true", 1)
    config = OutputTestConfig.model_validate({**task["evaluator"]["config"], "fresh": False})
    assert "test_calc.py" in config.files
    rollout.exec("cat > calc.py", stdin=HARNESS_FILES["calc.py"])
    reward, test = evaluate(rollout, """echo 'print("ok")' > test_calc.py""", config)
    assert reward == 0.0 and "add(2, 3) = -1" in test["output"], test
    reward, test = evaluate(rollout, "sed -i 's/a - b/a + b/' calc.py", config)
    assert reward == 1.0, test


def test_the_verdict_is_not_the_tested_codes_to_give(rollout: Sandbox) -> None:
    """Issue 34 item 8: code under test that ends its process with status 0 at import. A test that imports
    it into the process whose exit status is the verdict pays it 1 (the pitfall docs/CONTRACT.md's task
    authoring warns of); the demo's test runs it in a child and decides in its own process: 0."""
    from farm.demo import harness_task

    forging = "printf 'import os\\nos._exit(0)\\n' > calc.py"
    reward, _ = evaluate(rollout, forging)
    assert reward == 1.0  # the naive test: the tested code gave the verdict
    task = harness_task("demo-item-8", "shell", "true", 1)
    config = OutputTestConfig.model_validate({**task["evaluator"]["config"], "fresh": False})
    reward, test = evaluate(rollout, forging, config)
    assert reward == 0.0 and "add(2, 3) =" in test["output"], test


def test_quiesce_stops_undumpable_forking_daemons(rollout: Sandbox) -> None:
    """An undumpable process hides its /proc entries' owner; it and its children still all go."""
    daemon = (
        "setsid nohup python3 -c 'import ctypes, os, time; ctypes.CDLL(None).prctl(4, 0, 0, 0, 0); "
        "[os.fork() for _ in range(3)]; time.sleep(600)' >/dev/null 2>&1 </dev/null & sleep 0.5"
    )
    rollout.exec(daemon)
    assert "time.sleep" in rollout.exec("cat /proc/[0-9]*/cmdline | tr '\\0' ' '").stdout
    rollout.quiesce()
    assert "time.sleep" not in rollout.exec("cat /proc/[0-9]*/cmdline | tr '\\0' ' '").stdout
