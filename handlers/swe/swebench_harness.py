"""The `swebench` evaluator: the swebench package's Docker harness instead of the farm's sandbox.

Needs `swebench` importable and a reachable Docker engine on the eval worker; otherwise choosing it
raises EvaluatorUnavailable (a failed job naming the reason), never a silent fallback. The instance
must carry what the harness needs (e.g. `version`, `environment_setup_commit`, as SWE-bench ships).
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from handlers.evaluation_guard import EvaluatorUnavailable
from handlers.swe.instance import SweTask
from handlers.swe.verdict import LOG_TAIL_CHARS, PatchVerdict

MODEL_NAME = "rollout-farm"


def unavailable_reason() -> str | None:
    """Why the swebench harness cannot run here, or None when it can."""
    if importlib.util.find_spec("swebench") is None:
        return "the swebench package is not installed"
    docker = shutil.which("docker")
    if docker is None:
        return "no docker CLI on PATH"
    try:
        probe = subprocess.run([docker, "info"], capture_output=True, timeout=15)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"the Docker engine does not answer ({exc})"
    if probe.returncode != 0:
        return "the Docker engine does not answer (`docker info` failed)"
    return None


def evaluate_with_swebench(task: SweTask, patch: str, *, timeout_s: float) -> PatchVerdict:
    reason = unavailable_reason()
    if reason is not None:
        raise EvaluatorUnavailable(f"evaluator 'swebench' was chosen but {reason}; use evaluator 'farm'")
    started = time.monotonic()
    run_id = f"farm-{uuid.uuid4().hex[:10]}"
    with tempfile.TemporaryDirectory(prefix="swe-harness-") as scratch:
        root = Path(scratch)
        record = task.model_dump(exclude={"repo_path", "repo_url", "evaluator", "test_command"})
        for key in ("FAIL_TO_PASS", "PASS_TO_PASS"):
            record[key] = json.dumps(record[key])
        (root / "dataset.json").write_text(json.dumps([record]))
        prediction = {"instance_id": task.instance_id, "model_name_or_path": MODEL_NAME, "model_patch": patch}
        (root / "predictions.jsonl").write_text(json.dumps(prediction) + "\n")
        argv = [
            sys.executable, "-m", "swebench.harness.run_evaluation",
            "--dataset_name", str(root / "dataset.json"),
            "--predictions_path", str(root / "predictions.jsonl"),
            "--instance_ids", task.instance_id,
            "--run_id", run_id,
            "--max_workers", "1",
            "--timeout", str(int(timeout_s)),
        ]  # fmt: skip
        done = subprocess.run(argv, cwd=root, capture_output=True, text=True, timeout=timeout_s + 600)
        log = (done.stdout + done.stderr)[-LOG_TAIL_CHARS:]
        found = list(root.glob(f"logs/run_evaluation/{run_id}/*/{task.instance_id}/report.json"))
        if not found:
            # The harness could not evaluate (Docker, an image build...): unscored, an infrastructure class.
            raise EvaluatorUnavailable(
                f"the swebench harness wrote no report (exit {done.returncode}): {log}"
            )
        report = json.loads(found[0].read_text())[task.instance_id]
    status = report.get("tests_status", {})

    def results(kind: str) -> dict[str, bool]:
        lists = status.get(kind, {})
        return {t: True for t in lists.get("success", [])} | {t: False for t in lists.get("failure", [])}

    resolved = bool(report.get("resolved"))
    f2p, p2p = results("FAIL_TO_PASS"), results("PASS_TO_PASS")
    return PatchVerdict(
        instance_id=task.instance_id,
        reward=1.0 if resolved else 0.0,
        resolved=resolved,
        applied=bool(report.get("patch_successfully_applied")),
        fail_to_pass={t: f2p.get(t, False) for t in task.FAIL_TO_PASS},
        pass_to_pass={t: p2p.get(t, False) for t in task.PASS_TO_PASS},
        outcomes={t: "PASSED" if f2p.get(t, p2p.get(t)) else "FAILED" for t in task.test_ids},
        log=log,
        evaluator="swebench",
        duration_s=time.monotonic() - started,
    )
