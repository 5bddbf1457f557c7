"""A short learning run through the farm (`python -m bench.learn` with fewer, smaller steps): the warm-started
`tiny` policy trains on farm rollouts with weights published in place every step; the trainer's logprobs
match the farm's on the same weights, batches hold the staleness bound, every successful episode used the
tool, and `farm report` reads the run file back with per-step rewards and policy versions. Whether the
reward rises within the budget is the bench's figure (docs/PERFORMANCE.md), not asserted here: it depends
on the load."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from click.testing import CliRunner

pytestmark = [pytest.mark.integration, pytest.mark.slow]
pytest.importorskip("torch", reason="the tiny policy needs the model extra: pip install -e '.[model]'")


def test_short_learning_run(tmp_path: Path) -> None:
    from bench.learn import main
    from farm.models import JobResult
    from farm.report.cli import report

    summary = main(
        ["--steps", "3", "--groups", "2", "--n", "6", "--extra-in-flight", "4", "--updates", "2",
         "--max-seconds", "120", "--runs-dir", str(tmp_path)]
    )  # fmt: skip
    assert summary["steps"] >= 1
    assert summary["mismatch_max"] <= 1e-4
    assert summary["staleness_max"] <= 1
    per_success = summary["tool_calls_per_success_end"]
    assert per_success is None or per_success >= 1.0
    assert 0.0 <= summary["start"] <= 1.0 and not math.isnan(summary["end"])
    lines = [
        JobResult.model_validate_json(line) for line in Path(summary["run_file"]).read_text().splitlines()
    ]
    assert lines and all("evaluator_reward" in r.metadata for r in lines)
    for r in lines:  # the reward trained on: the evaluator's, counted only with a tool call
        assert r.reward in (0.0, r.metadata["evaluator_reward"])
    printed = CliRunner().invoke(report, [summary["run_file"], "--no-plots"])
    assert printed.exit_code == 0, printed.output
    assert "mean reward" in printed.output
