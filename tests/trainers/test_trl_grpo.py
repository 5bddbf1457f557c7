"""TRL's GRPOTrainer takes the farm's trajectories through its rollout hook (bench/learning_trl.py): real
farm results (tests/trainers/farm_rollouts.py: multi-turn tool episodes, tool results masked) become TRL's
rows, and TRL itself (the installed trl, on CPU, the tiny policy) builds its loss mask, sampler logprobs
and advantages from them, then takes an optimizer step. The farm end of the hook (the DAPO consumer over
REST) is the slow test tests/integration/test_learning_run_trl.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch", reason="the tiny policy needs the model extra: pip install -e '.[model]'")
pytest.importorskip("trl", reason="TRL's GRPOTrainer is the trl extra: pip install -e '.[trl]'")

from bench.learning_trl import farm_reward, in_prompt_order, row_of, trace_of
from farm.client.groups import Group
from farm.models import JobResult
from tests.trainers import farm_rollouts

N = 4
REWARDS = [1.0, 0.0, 0.0, 1.0]


def group_results() -> list[JobResult]:
    return [farm_rollouts.job(f"g-{s}", "g", reward=w) for s, w in enumerate(REWARDS)]


def rows(results: list[JobResult]) -> dict[str, list[Any]]:
    eos = farm_rollouts.tokenizer().eos_token_id
    out: dict[str, list[Any]] = {"prompt_ids": [], "completion_ids": [], "logprobs": [], "env_mask": []}
    for result in results:
        for key, value in row_of(result, [eos], eos).items():
            out[key].append(value)
    out["farm_reward"] = [r.reward for r in results]
    return out


def test_a_row_is_the_farm_trace_with_its_loss_mask_as_env_mask() -> None:
    results = group_results()
    out = rows(results)
    for i, result in enumerate(results):
        (trace,) = result.trajectory.traces
        assert out["prompt_ids"][i] == trace.prompt_ids
        assert out["completion_ids"][i] == trace.response_ids
        assert out["logprobs"][i] == trace.response_logprobs
        assert out["env_mask"][i] == trace.loss_mask
        assert 0 in trace.loss_mask and 1 in trace.loss_mask  # tool results sit inside the completion
    assert farm_reward(["c"] * N, farm_reward=out["farm_reward"]) == REWARDS


def test_a_failed_job_is_an_untrained_row_and_a_split_one_is_refused() -> None:
    (ok,) = group_results()[:1]
    failed = ok.model_copy(update={"trajectory": ok.trajectory.model_copy(update={"traces": []})})
    assert row_of(failed, [7, 8], 2) == {
        "prompt_ids": [7, 8],
        "completion_ids": [2],
        "logprobs": [0.0],
        "env_mask": [0],
    }
    split = farm_rollouts.job("s", "g", reward=1.0, per_turn=True)
    with pytest.raises(ValueError, match="2 traces"):
        trace_of(split)


def test_groups_line_up_with_trls_prompts() -> None:
    def group(question: str) -> Group:
        return Group(
            group_id=question, prompt_index=0, instance={"question": question}, policy_version=0,
            results=[], rewards=[],
        )  # fmt: skip

    ordered, unmatched = in_prompt_order([group("a"), group("b")], ["b", "a"])
    assert [g.group_id for g in ordered] == ["b", "a"] and unmatched == 0
    ordered, unmatched = in_prompt_order([group("a"), group("c")], ["b", "a"])
    assert [g.group_id for g in ordered] == ["c", "a"] and unmatched == 1


def test_trl_trains_only_the_sampled_tokens_against_the_farm_reward(tmp_path: Path) -> None:
    import torch
    from datasets import Dataset
    from trl import GRPOConfig, GRPOTrainer

    from bench.learning import build_tiny

    tokenizer = farm_rollouts.tokenizer()
    model = build_tiny(tokenizer, seed=0)
    results = group_results()
    calls: list[list[Any]] = []

    def rollout_func(prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        calls.append(prompts)
        return rows(results)

    config = GRPOConfig(
        output_dir=str(tmp_path), use_cpu=True, bf16=False, gradient_checkpointing=False,
        per_device_train_batch_size=N, num_generations=N, max_steps=1, learning_rate=1e-3,
        report_to="none", save_strategy="no", disable_tqdm=True, beta=0.0, scale_rewards="none",
    )  # fmt: skip
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=farm_reward,
        args=config,
        train_dataset=Dataset.from_list([{"prompt": "q"}] * N),
        processing_class=tokenizer.hf,
        rollout_func=rollout_func,
    )
    scored = trainer._generate_and_score_completions([{"prompt": "q"} for _ in range(N)])
    assert calls == [["q"] * N]  # the hook gets TRL's rows, one per completion, no further duplication
    for i, result in enumerate(results):
        (trace,) = result.trajectory.traces
        width = len(trace.response_ids)
        trained = (scored["completion_mask"] * scored["tool_mask"])[i]
        assert trained[:width].tolist() == trace.loss_mask and not trained[width:].any()
        assert scored["sampling_per_token_logps"][i, :width].tolist() == pytest.approx(
            trace.response_logprobs
        )
    mean = sum(REWARDS) / N  # TRL's GRPO advantage: the farm's reward less its group's mean
    assert scored["advantages"].tolist() == pytest.approx([w - mean for w in REWARDS])

    before = [p.detach().clone() for p in model.parameters()]
    trainer.train()
    assert trainer.state.global_step == 1
    assert any(not torch.equal(a, p) for a, p in zip(before, model.parameters(), strict=True))
    logged = next(h for h in trainer.state.log_history if "reward" in h)
    assert logged["reward"] == pytest.approx(mean)
