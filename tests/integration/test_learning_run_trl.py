"""A short learning run with TRL's own GRPOTrainer (`python -m bench.learn --trainer trl`, fewer and smaller
steps): its rollout hook takes the farm's DAPO batches, TRL takes its optimizer steps on CPU, a callback
publishes the weights after each batch. Checked: TRL trained exactly the tokens the policy sampled (its own
logged completion length counts only env_mask 1 tokens, and equals the farm traces' loss_mask sums; tool
output was handed over but masked), TRL's logged reward is the farm's, each batch was sampled by the
weights TRL held (staleness 0, trainer logprobs = farm logprobs), and the run file reads back. Whether the
reward rises is the bench's figure (docs/PERFORMANCE.md), not asserted here."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]
pytest.importorskip("torch", reason="the tiny policy needs the model extra: pip install -e '.[model]'")
pytest.importorskip("trl", reason="TRL's GRPOTrainer is the trl extra: pip install -e '.[trl]'")


def test_short_trl_learning_run(tmp_path: Path) -> None:
    from bench.learn import main
    from farm.models import JobResult

    steps, updates = 2, 2
    summary = main(
        ["--trainer", "trl", "--steps", str(steps), "--groups", "2", "--n", "4", "--extra-in-flight", "2",
         "--updates", str(updates), "--max-seconds", "300", "--runs-dir", str(tmp_path)]
    )  # fmt: skip
    assert summary["trainer"] == "trl" and summary["steps"] == steps
    assert summary["mismatch_max"] <= 1e-4
    assert summary["staleness_max"] == 0
    assert 0.0 <= summary["start"] <= 1.0 and not math.isnan(summary["end"])

    trl = summary["trl"]
    history = trl["log_history"]
    # one optimizer step per pass over a batch: TRL's global steps are batches x num_iterations
    assert max(h.get("step", 0) for h in history) == steps * updates
    assert sum(1 for h in history if "loss" in h) == steps * updates
    generated = [h for h in history if "completions/mean_length" in h]
    assert len(generated) == steps == len(trl["sampled_tokens"])
    lines = [JobResult.model_validate_json(x) for x in Path(summary["run_file"]).read_text().splitlines()]
    assert len(lines) == steps * 2 * 4
    for step, (logged, sampled) in enumerate(zip(generated, trl["sampled_tokens"], strict=True)):
        assert len(sampled) == 2 * 4
        assert logged["completions/mean_length"] == pytest.approx(sum(sampled) / len(sampled))
        farm = [r for r in lines if r.metadata["step"] == step]
        assert sorted(sampled) == sorted(sum(t.loss_mask) for r in farm for t in r.trajectory.traces)
        assert logged["reward"] == pytest.approx(sum(r.reward or 0.0 for r in farm) / len(farm))
    with_tool = [r for r in lines if any(t.metadata.get("tool_calls") for t in r.trajectory.traces)]
    if with_tool:  # a tool call's result sits inside the completion: handed to TRL, masked out of its loss
        assert sum(trl["masked_tokens"]) > 0
        assert all(0 in t.loss_mask for r in with_tool for t in r.trajectory.traces)
