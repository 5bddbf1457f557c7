"""TRL's own `GRPOTrainer` learning through the farm: the farm does the rollouts (its DAPO consumer over the
REST API), TRL does the optimisation on CPU. Written against TRL 1.16.0 (trl/trainer/grpo_trainer.py,
trl/trainer/grpo_config.py); `python -m bench.learn --trainer trl` runs it.

How the farm's output maps onto TRL's rollout hook (`GRPOTrainer(rollout_func=...)`, experimental in TRL):
- `rollout_func(prompts, trainer) -> dict` gets the generation batch's prompts as TRL's RepeatSampler laid
  them out (each prompt `num_generations` times in a row, no further duplication) and returns one completion
  per row: "prompt_ids", "completion_ids", "logprobs" are required; every other key goes to the reward
  functions as a keyword argument, except "env_mask", which TRL takes as its tool mask
  (`GRPOTrainer._generate`: `tool_mask = extra_fields.pop("env_mask", None)`): the loss mask is
  `completion_mask * tool_mask`, so the farm's `loss_mask` (0 on the sandbox's tool output and template
  text) maps onto it one to one and those tokens are never trained.
- A farm trace is one sequence: its prompt_ids, its response_ids (every turn and tool result after the
  prompt) and response_logprobs (0.0 where masked) are TRL's prompt_ids / completion_ids / logprobs.
- The reward is the farm's (its evaluator's, counted only with a tool call: `through_the_tool`), passed as
  the extra field `farm_reward` and returned as is by `farm_reward`, TRL's one reward function.
- Importance sampling: TRL corrects for the sampler's logprobs only with `use_vllm=True`
  (`vllm_importance_sampling_correction`, which needs vLLM and TRL's own weight-sync client); without it the
  returned logprobs reach the loss only as `sampling_per_token_logps` for `off_policy_mask_threshold`, and
  the PPO ratio's denominator is TRL's recomputation under the weights it holds when the batch arrives.
  That is the behaviour policy's logprob exactly when every turn was sampled by those weights, so this
  run's DAPO consumer admits only groups of the current version (`max_offpolicyness=0`), and the |Δ| column
  (trainer vs farm logprob, each turn under the weights that sampled it) shows the two agree.
- Weight publishing: TRL's own sync (`vllm_generation.sync_weights()` before a rollout_func call) exists only
  with vLLM; here a `TrainerCallback.on_step_end` publishes after the last optimizer step on each batch
  (`num_iterations` steps per generation) through the same `Publisher` as the compact loop (SGLang's
  /update_weights_from_disk on the reference LLM, the pool re-registered with the new policy_version).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import LlamaForCausalLM, TrainerCallback, TrainerControl, TrainerState, TrainingArguments

from bench.learning import Mismatch, Publisher, Snapshots, check_trace, episode_stats, through_the_tool
from farm.client import DapoConsumer
from farm.client.groups import Group
from farm.client.staleness import StalenessReport
from farm.models import JobResult, Trace


@dataclass
class Versions:
    """The policy version the farm samples from: how many batches TRL has trained on."""

    current: int = 0


@dataclass
class Rollouts:
    """One generation batch as the hook fetched it: what the per-step row and the run file need."""

    groups: list[Group]
    results: list[JobResult]
    staleness: StalenessReport | None
    mismatch: Mismatch
    unmatched_prompts: int
    """Groups whose TRL prompt is not the question the farm rolled out (the consumer draws its own order)."""
    sampled_tokens: list[int]
    """Per row, the completion tokens the policy sampled (env_mask 1: what TRL trains)."""
    masked_tokens: int
    """Completion tokens TRL holds but does not train: tool output and template text (env_mask 0)."""


def trace_of(result: JobResult) -> Trace | None:
    traces = result.trajectory.traces
    if len(traces) > 1:  # a TRL row is one sequence; the math handler's agent loop merges turns into one
        raise ValueError(f"job {result.job_id}: {len(traces)} traces; TRL's rollout_func takes one per row")
    return traces[0] if traces else None


def row_of(result: JobResult, fallback_prompt: list[int], eos: int) -> dict[str, list[Any]]:
    """TRL's row for one farm result. A failed job (no trace) becomes an EOS completion that nothing
    trains (env_mask 0) with reward 0, so the group keeps its `num_generations` rows."""
    trace = trace_of(result)
    if trace is None or not trace.response_ids:
        return {"prompt_ids": fallback_prompt, "completion_ids": [eos], "logprobs": [0.0], "env_mask": [0]}
    return {
        "prompt_ids": list(trace.prompt_ids),
        "completion_ids": list(trace.response_ids),
        "logprobs": list(trace.response_logprobs),
        "env_mask": list(trace.loss_mask),
    }


def in_prompt_order(groups: list[Group], questions: Sequence[str]) -> tuple[list[Group], int]:
    """The farm's groups lined up with TRL's per-group prompts where their questions match (the order of
    groups in a batch does not change the loss); the count of groups left on another question."""
    pending = list(groups)
    slots: list[Group | None] = []
    for question in questions:
        match = next((g for g in pending if g.instance.get("question") == question), None)
        if match is not None:
            pending.remove(match)
        slots.append(match)
    unmatched = slots.count(None)
    ordered = [slot if slot is not None else pending.pop(0) for slot in slots]
    return ordered, unmatched


@dataclass
class FarmRolloutFunc:
    """TRL's `rollout_func`: a generation batch from the farm's DAPO consumer, as TRL's rows."""

    dapo: DapoConsumer
    n: int
    versions: Versions
    snapshots: Snapshots
    temperature: float
    eos_token_id: int
    timeout_s: float = 600.0
    batches: list[Rollouts] = field(default_factory=list)

    def __call__(self, prompts: list[Any], trainer: Any) -> dict[str, list[Any]]:
        if len(prompts) % self.n:
            raise ValueError(f"{len(prompts)} prompts are not whole groups of {self.n}")
        questions = [str(p) for p in prompts[:: self.n]]
        version = self.versions.current
        batch = self.dapo.next_batch(len(questions), policy_version=version, timeout_s=self.timeout_s)
        groups, unmatched = in_prompt_order([through_the_tool(g) for g in batch.groups], questions)
        mismatch = Mismatch()
        out: dict[str, list[Any]] = {"prompt_ids": [], "completion_ids": [], "logprobs": [], "env_mask": []}
        out["farm_reward"] = []
        for group in groups:
            traced = [t for t in map(trace_of, group.results) if t is not None]
            fallback = list(traced[0].prompt_ids) if traced else [self.eos_token_id]
            for result, reward in zip(group.results, group.rewards, strict=True):
                for key, value in row_of(result, fallback, self.eos_token_id).items():
                    out[key].append(value)
                out["farm_reward"].append(float(reward))
                for trace in result.trajectory.traces:
                    check_trace(trace, self.snapshots, self.temperature, mismatch)
        results = [r for g in groups for r in g.results]
        sampled = [sum(mask) for mask in out["env_mask"]]
        masked = sum(len(mask) for mask in out["env_mask"]) - sum(sampled)
        self.batches.append(
            Rollouts(groups, results, batch.stats.staleness, mismatch, unmatched, sampled, masked)
        )
        return out


def farm_reward(completions: list[Any], farm_reward: list[float], **_: Any) -> list[float]:
    """TRL's reward function: the farm's reward for each row, handed over by the rollout hook."""
    return [float(r) for r in farm_reward]


@dataclass
class PublishEachBatch(TrainerCallback):
    """After TRL's last optimizer step on a generation batch: publish the weights to the farm under the next
    policy version, keep a snapshot for the |Δ| check, and hand the batch to `on_batch` (the caller's row)."""

    publisher: Publisher
    snapshots: Snapshots
    versions: Versions
    rollouts: FarmRolloutFunc
    steps_per_batch: int
    on_batch: Callable[[Rollouts, int], bool]
    """Called with the batch and the version it was trained at; True stops training (time budget)."""

    def on_step_end(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        model: LlamaForCausalLM | None = None,
        **_: Any,
    ) -> TrainerControl:
        if state.global_step % self.steps_per_batch or model is None:
            return control
        trained = self.versions.current
        with torch.no_grad():
            self.versions.current += 1
            self.publisher.publish(model, self.versions.current)
            self.snapshots.add(self.versions.current, model)
        if self.on_batch(self.rollouts.batches[-1], trained):
            control.should_training_stop = True
        return control


def batch_stats(batch: Rollouts) -> dict[str, float]:
    return episode_stats(batch.results, [w for g in batch.groups for w in g.rewards])


@dataclass
class TrlOptions:
    """The GRPOTrainer options this run exposes (TRL's names; see GRPOConfig's help for each)."""

    loss_type: str = "dapo"
    scale_rewards: str = "group"
    beta: float = 0.0
    num_iterations: int = 4
    learning_rate: float = 2e-3
    epsilon: float = 0.2
    epsilon_high: float | None = None
    top_entropy_quantile: float = 1.0
    max_completion_length: int = 256
    """Only `dr_grpo`'s normaliser reads it here: the farm, not TRL, bounds the completions."""


def train(
    model: LlamaForCausalLM,
    optimizer: torch.optim.Optimizer,
    tokenizer: Any,
    questions: Sequence[str],
    rollouts: FarmRolloutFunc,
    callback: PublishEachBatch,
    options: TrlOptions,
    groups: int,
    steps: int,
    seed: int,
    output_dir: str,
) -> Any:
    """TRL's GRPOTrainer on CPU: `groups` prompts x `n` farm rollouts per generation batch, each batch
    trained `num_iterations` optimizer steps (one step per pass: the whole batch is one device batch),
    for `steps` batches. The optimizer is the warm start's (its Adam moments carry on), at a constant lr.
    Returns the trainer (its `state.log_history` holds TRL's own per-step metrics)."""
    from datasets import Dataset
    from transformers.trainer_callback import PrinterCallback, ProgressCallback
    from trl import GRPOConfig, GRPOTrainer

    for options_group in optimizer.param_groups:
        options_group["lr"] = options.learning_rate
    config = GRPOConfig(
        output_dir=output_dir,
        use_cpu=True,
        bf16=False,
        fp16=False,
        gradient_checkpointing=False,
        per_device_train_batch_size=groups * rollouts.n,
        gradient_accumulation_steps=1,
        steps_per_generation=1,
        num_generations=rollouts.n,
        num_iterations=options.num_iterations,
        max_steps=steps * options.num_iterations,
        learning_rate=options.learning_rate,
        lr_scheduler_type="constant",
        max_grad_norm=1.0,
        loss_type=options.loss_type,
        scale_rewards=options.scale_rewards,
        beta=options.beta,
        epsilon=options.epsilon,
        epsilon_high=options.epsilon_high,
        top_entropy_quantile=options.top_entropy_quantile,
        temperature=rollouts.temperature,
        max_completion_length=options.max_completion_length,
        logging_steps=1,
        report_to="none",
        save_strategy="no",
        disable_tqdm=True,
        seed=seed,
        dataloader_num_workers=0,
    )
    # RepeatSampler drops a last chunk smaller than `groups` prompts: one row per prompt of the whole run
    rows = [{"prompt": questions[i % len(questions)]} for i in range(groups * steps)]
    trainer = GRPOTrainer(
        model=model,
        reward_funcs=farm_reward,
        args=config,
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
        rollout_func=rollouts,
        callbacks=[callback],
        optimizers=(optimizer, None),
    )
    for quiet in (PrinterCallback, ProgressCallback):  # the run prints its own row per batch
        trainer.remove_callback(quiet)
    trainer.train()
    return trainer
