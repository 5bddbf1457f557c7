"""Scoring a patch for a SWE-bench-style instance, in a fresh sandbox.

Check the repository out at the base commit, apply the patch (`git apply`, else `patch --fuzz`), put
the files the test patch touches back to the base and apply the test patch, run the test files of both
lists with `pytest -rA`, and read each listed test's outcome. Reward 1 only when every FAIL_TO_PASS
test passes and every PASS_TO_PASS test stays green. An empty patch or one that does not apply scores
0; an instance whose test patch does not apply raises (the instance is broken, not the patch).

`evaluate_patch` is also the `patch` evaluator of other handlers (e.g. `harness`); keep its signature.
"""

from __future__ import annotations

import re
import shlex
import time
from collections.abc import Callable
from typing import Any

from pydantic import BaseModel

from containers import Sandbox, get_runtime
from containers.spec import SandboxSpec
from handlers.evaluation_guard import command_path, evaluation_env, refused_patch_paths, workspace_path_dirs
from handlers.swe import pytest_log
from handlers.swe.instance import SweTask
from handlers.swe.repository import GIT, check_source, prepare_repository, sandbox_env, source_binds
from handlers.swe.verdict import LOG_TAIL_CHARS, PatchVerdict

SCRATCH = "/tmp/swe-eval"
_PATCH_PATH = re.compile(r"^(?:---|\+\+\+) (?:a|b)/(.+?)(?:\t.*)?$")

_APPLY = f"""
set -u
git() {{ command {GIT} "$@"; }}
mkdir -p {SCRATCH} && cat > {SCRATCH}/model.patch
if git apply --check --whitespace=nowarn {SCRATCH}/model.patch 2>{SCRATCH}/apply.err; then
  git apply --verbose --whitespace=nowarn {SCRATCH}/model.patch 2>&1 &&
    echo "applied with git apply" && exit 0
fi
cat {SCRATCH}/apply.err
if patch --batch --fuzz=5 -p1 --forward --dry-run -i {SCRATCH}/model.patch >/dev/null 2>&1; then
  patch --batch --fuzz=5 -p1 --forward --no-backup-if-mismatch -i {SCRATCH}/model.patch 2>&1 &&
    echo "applied with patch --fuzz=5" && exit 0
fi
echo "the patch does not apply at the base commit"
exit 1
"""

_TEST_PATCH = f"""
set -u
git() {{ command {GIT} "$@"; }}
cat > {SCRATCH}/test.patch
for f in "$@"; do
  if git cat-file -e "HEAD:$f" 2>/dev/null; then git checkout --quiet HEAD -- "$f"; else rm -rf -- "$f"; fi
done
[ -s {SCRATCH}/test.patch ] || exit 0
git apply --verbose --whitespace=nowarn {SCRATCH}/test.patch 2>&1
"""


class BadTestPatch(RuntimeError):
    """The instance's test patch does not apply at its base commit."""


def as_task(instance: SweTask | BaseModel | dict[str, Any]) -> SweTask:
    if isinstance(instance, SweTask):
        return instance
    data = instance.model_dump() if isinstance(instance, BaseModel) else dict(instance)
    return SweTask.model_validate(data)


def patched_paths(diff: str) -> list[str]:
    """Paths a unified diff touches (old and new names), in order."""
    paths = []
    for line in diff.splitlines():
        match = _PATCH_PATH.match(line)
        if match:
            paths.append(match.group(1).strip('"'))
    return list(dict.fromkeys(paths))


def verdict_from_log(task: SweTask, test_output: str, **fields: Any) -> PatchVerdict:
    """Grade the listed tests from pytest -rA output (`fields` fill the rest of the verdict)."""
    statuses = pytest_log.outcomes(test_output, task.test_ids)
    f2p = {t: pytest_log.passed(statuses[t]) for t in task.FAIL_TO_PASS}
    p2p = {t: pytest_log.passed(statuses[t]) for t in task.PASS_TO_PASS}
    resolved = all(f2p.values()) and all(p2p.values())
    return PatchVerdict(
        instance_id=task.instance_id,
        reward=1.0 if resolved else 0.0,
        resolved=resolved,
        fail_to_pass=f2p,
        pass_to_pass=p2p,
        outcomes=statuses,
        **fields,
    )


def _unscored(task: SweTask, log: str, **fields: Any) -> PatchVerdict:
    return PatchVerdict(
        instance_id=task.instance_id,
        reward=0.0,
        fail_to_pass=dict.fromkeys(task.FAIL_TO_PASS, False),
        pass_to_pass=dict.fromkeys(task.PASS_TO_PASS, False),
        outcomes=dict.fromkeys(task.test_ids, pytest_log.MISSING),
        log=log[-LOG_TAIL_CHARS:],
        **fields,
    )


def pytest_command(task: SweTask, workdir: str) -> str:
    files = " ".join(shlex.quote(f) for f in pytest_log.files_of(task.test_ids))
    return (
        f"{task.test_command} -rA --rootdir={shlex.quote(workdir)} -p no:cacheprovider --color=no {files}"
        f" > {SCRATCH}/test.log 2>&1"
    )


def _sandbox_spec(task: SweTask, runtime: dict[str, Any], timeout_s: float) -> SandboxSpec:
    return SandboxSpec(
        image=runtime.get("image"),
        network=bool(runtime.get("network", False)),
        workdir=runtime.get("workdir") or "/workspace",
        ro_binds=source_binds(task),
        env=sandbox_env(runtime),
        ttl_s=timeout_s + 60,
    )


def _apply_test_patch(sandbox: Sandbox, task: SweTask, *, timeout_s: float) -> None:
    """Put the files the test patch touches back to the base commit, then apply it."""
    paths = " ".join(shlex.quote(p) for p in patched_paths(task.test_patch))
    tests = sandbox.exec(f"set -- {paths}\n{_TEST_PATCH}", stdin=task.test_patch, timeout=timeout_s)
    if tests.exit_code != 0:
        raise BadTestPatch(
            f"the test patch of {task.instance_id} does not apply at {task.base_commit}: "
            f"{(tests.stdout + tests.stderr).strip()[-1500:]}"
        )


def _test_patch_applies_at_base(sandbox: Sandbox, task: SweTask, *, timeout_s: float) -> bool:
    """Whether the test patch applies to the index (the base commit's content for the files it touches,
    which the model's patch never staged): the same step on the state the farm made."""
    if not task.test_patch.strip():
        return True
    check = f"command {GIT} apply --cached --check --whitespace=nowarn -"
    return sandbox.exec(check, stdin=task.test_patch, timeout=timeout_s).exit_code == 0


def _implicit_files_refusal(
    sandbox: Sandbox, task: SweTask, patch: str, started: float
) -> PatchVerdict | None:
    """The patch's 0 (flagged) when it changes files the test run loads implicitly: a patch that passes
    through them proves nothing. None otherwise."""
    refused = refused_patch_paths(patch, workspace_path_dirs(command_path(sandbox), sandbox.workdir))
    if not refused:
        return None
    why = f"the patch changes files the test run loads implicitly: {', '.join(refused)}"
    return _unscored(
        task, why, refused_paths=refused, evaluation_refused=why, duration_s=time.monotonic() - started
    )


def _apply_test_patch_after(
    sandbox: Sandbox, task: SweTask, left: Callable[[], float], started: float
) -> PatchVerdict | None:
    """Applies the instance's test patch over the model's; None when it applied. A test patch that no
    longer applies is the model patch's 0 (flagged) when it still applies at the base, else BadTestPatch."""
    try:
        _apply_test_patch(sandbox, task, timeout_s=left())
    except BadTestPatch as exc:
        if not _test_patch_applies_at_base(sandbox, task, timeout_s=left()):
            raise  # the instance is broken, whatever the patch did
        why = f"the patch leaves the tree so that the instance's test patch cannot apply: {exc}"
        return _unscored(
            task, why, applied=True, evaluation_refused=why[:2000], duration_s=time.monotonic() - started
        )
    return None


def evaluate_patch(
    instance: SweTask | BaseModel | dict[str, Any],
    patch: str,
    *,
    runtime: dict[str, Any] | None = None,
    timeout_s: float = 300,
    check: Callable[[], None] | None = None,
) -> PatchVerdict:
    """Score `patch` for `instance` (a SweTask/SweInstance or a dict of its fields).

    `runtime` is a job's runtime dict (`backend`, `image`, `network`, `workdir`); `timeout_s` bounds the
    whole evaluation; `check` is called between steps and may raise to abandon it (cancellation)."""
    started = time.monotonic()
    task = as_task(instance)
    if not patch.strip():
        return _unscored(task, "empty patch: nothing to evaluate", duration_s=time.monotonic() - started)
    if task.evaluator == "swebench":
        from handlers.swe.swebench_harness import evaluate_with_swebench

        return evaluate_with_swebench(task, patch, timeout_s=timeout_s)
    runtime = runtime or {}
    check_source(task, network=bool(runtime.get("network", False)))
    spec = _sandbox_spec(task, runtime, timeout_s)
    deadline = started + timeout_s

    def left() -> float:
        if check is not None:
            check()
        return max(deadline - time.monotonic(), 1.0)

    with get_runtime(runtime.get("backend", "local")).start(spec) as sandbox:
        refusal = _implicit_files_refusal(sandbox, task, patch, started)
        if refusal is not None:
            return refusal
        prepare_repository(sandbox, task, timeout_s=left())
        applied = sandbox.exec(_APPLY, stdin=patch, timeout=left())
        log = applied.stdout + applied.stderr
        if applied.exit_code != 0:
            return _unscored(task, log, duration_s=time.monotonic() - started)
        refusal = _apply_test_patch_after(sandbox, task, left, started)
        if refusal is not None:
            return refusal
        env = {**evaluation_env(sandbox, rollout_sandbox=False), "COLUMNS": "200"}
        run = sandbox.exec(pytest_command(task, sandbox.workdir), timeout=left(), env=env)
        left()
        summary = sandbox.exec(
            f"sed -n '/short test summary info/,$p' {SCRATCH}/test.log", timeout=60, output_limit=64 << 20
        )
        tail = sandbox.exec(f"tail -c {LOG_TAIL_CHARS} {SCRATCH}/test.log", timeout=60)
    return verdict_from_log(
        task,
        summary.stdout,
        applied=True,
        log=(log + "\n" + tail.stdout)[-LOG_TAIL_CHARS:],
        timed_out=run.timed_out,
        duration_s=time.monotonic() - started,
    )
