"""NeMo-RL accepts the farm's DatumSpecs: a checker of NeMo-RL's rules, written from reading its code.

Rules encoded (NVIDIA-NeMo/RL @ 7ea279abfbeb698b092856d0dab61e7cf39bc909):
- nemo_rl/data/interfaces.py `DatumSpec`: message_log, length, extra_env_info, loss_multiplier, idx,
  task_name (optional).
- nemo_rl/data/collate_fn.py `rl_collate_fn`: reads datum["length"], ["loss_multiplier"],
  ["extra_env_info"], ["idx"] (KeyError without them), task_name by .get.
- nemo_rl/algorithms/grpo.py: the rollout batch carries `total_reward`, baselines grouped by prompt.
- nemo_rl/data/llm_message_utils.py `message_log_to_flat_messages`: per key, message tensors are
  concatenated (token_ids of every message, in order, make the sequence); grpo.py
  `add_grpo_token_loss_masks_and_generation_logprobs` trains on assistant messages carrying
  generation_logprobs (one per token) and nothing else.
- Dataset-side `length` is the tokenized prompt, before any rollout turn is appended.
"""

from __future__ import annotations

from typing import Any

import pytest

from farm.adapters import flatten, to_nemo_rl
from tests.trainers import farm_rollouts


def collate(batch: list[dict[str, Any]]) -> dict[str, Any]:
    """What rl_collate_fn reads from each datum (plus grpo's total_reward)."""
    return {
        "message_log": [d["message_log"] for d in batch],
        "length": [int(d["length"]) for d in batch],
        "loss_multiplier": [float(d["loss_multiplier"]) for d in batch],
        "extra_env_info": [d["extra_env_info"] for d in batch],
        "task_name": [d.get("task_name") for d in batch],
        "idx": [d["idx"] for d in batch],
        "total_reward": [float(d["total_reward"]) for d in batch],
    }


def flat(log: list[dict[str, Any]]) -> tuple[list[int], list[int], list[float]]:
    """(token ids, loss mask, generation logprobs) as NeMo-RL flattens a message log."""
    ids: list[int] = []
    mask: list[int] = []
    logprobs: list[float] = []
    for message in log:
        assert isinstance(message["role"], str) and isinstance(message["content"], str)
        tokens = list(message["token_ids"])
        trained = message["role"] == "assistant" and "generation_logprobs" in message
        if trained:
            assert len(message["generation_logprobs"]) == len(tokens)
        ids += tokens
        mask += [int(trained)] * len(tokens)
        logprobs += list(message["generation_logprobs"]) if trained else [0.0] * len(tokens)
    return ids, mask, logprobs


def test_nemo_rl_accepts_real_farm_trajectories() -> None:
    results = farm_rollouts.results()
    data = to_nemo_rl(results)
    batch = collate(data)
    samples = flatten(results)
    for datum, sample in zip(data, samples, strict=True):
        trace = sample.trace
        ids, mask, logprobs = flat(datum["message_log"])
        assert ids == trace.prompt_ids + trace.response_ids
        assert mask == [0] * len(trace.prompt_ids) + trace.loss_mask
        assert logprobs == [0.0] * len(trace.prompt_ids) + trace.response_logprobs
        assert datum["length"] == len(trace.prompt_ids)
        # Every message of every turn is kept, in order, with its content.
        log = datum["message_log"]
        assert [(m["role"], m["content"]) for m in log] == [
            (m["role"], m["content"]) for m in [*trace.prompt_messages, *trace.response_messages]
        ]
    assert batch["idx"] == [s.group_index for s in samples]
    assert batch["total_reward"] == [s.reward for s in samples]
    assert batch["loss_multiplier"] == [1.0] * len(samples)
    assert set(batch["task_name"]) == {"tool_agent"}
    assert {e["group_id"] for e in batch["extra_env_info"]} == {"g-a", "g-b"}
    tools = [m for m in data[0]["message_log"] if m["role"] == "tool"]
    assert [m["content"] for m in tools] == [
        "calc says 1",
        "search found q0",
        "calc says 2",
        "search found q1",
    ]
    # Each message holds its own tokens (ChatML closes every turn with <|im_end|>).
    tok = farm_rollouts.tokenizer()
    for message in data[0]["message_log"]:
        assert message["token_ids"], "an empty tensor would turn NeMo-RL's concatenated ids float"
        assert message["content"] in tok.decode(message["token_ids"])


@pytest.mark.parametrize("key", ["length", "loss_multiplier", "extra_env_info", "idx"])
def test_collate_needs_what_the_adapter_gives(key: str) -> None:
    data = to_nemo_rl(farm_rollouts.results())
    with pytest.raises(KeyError):
        collate([{k: v for k, v in d.items() if k != key} for d in data])
