"""veRL-style batch: padded numpy arrays under the keys veRL's DataProto uses (convert with torch.from_numpy).

Prompts are left-padded and responses right-padded, so `input_ids = prompts ++ responses` keeps every
prompt flush against its response, as veRL's rollout workers produce it. The reward sits in `rm_scores`
on the last response token (veRL takes an existing `rm_scores` as the reward). The sampling logprobs
are `rollout_log_probs`: veRL computes `old_log_probs` itself and refuses a batch that already holds
different ones.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from farm.adapters.samples import Source, TrainSample, flatten
from farm.adapters.termination import TerminationRules


def to_verl(
    source: Source,
    *,
    pad_token_id: int,
    max_prompt_length: int | None = None,
    max_response_length: int | None = None,
    truncate: bool = False,
    termination: TerminationRules | None = None,
) -> dict[str, Any]:
    """Tensor keys (int64/float32 arrays): prompts, responses, input_ids, attention_mask, position_ids,
    response_mask, rollout_log_probs, rm_scores, rewards. Non-tensor keys (DataProto.non_tensor_batch):
    uid (group ids, GRPO's grouping key) and traj_idx, dtype=object: convert every other array with
    torch.from_numpy and pass both to DataProto.from_single_dict.

    Too-long sequences raise ValueError unless `truncate` (prompts lose their oldest tokens, responses
    their tail; a truncated response's reward still sits on its last kept token).
    """
    samples = flatten(source, termination)
    prompts = [
        _fit(s.trace.prompt_ids, max_prompt_length, truncate, "prompt", keep_tail=True) for s in samples
    ]
    responses = [
        _fit(s.trace.response_ids, max_response_length, truncate, "response", keep_tail=False)
        for s in samples
    ]
    p_len = max_prompt_length or max((len(p) for p in prompts), default=0)
    # At least one response column: a sample whose response is empty still carries its reward (veRL's
    # reward managers write it at valid_response_length - 1, which for 0 is the last column).
    r_len = max_response_length or max((len(r) for r in responses), default=0) or 1
    prompt_ids, prompt_attention = _left_padded(prompts, p_len, pad_token_id)
    rows = _response_rows(samples, responses, r_len, pad_token_id)
    response_ids, response_attention, response_mask, logprobs, scores = rows
    attention = np.concatenate([prompt_attention, response_attention], axis=1)
    return {
        "prompts": prompt_ids,
        "responses": response_ids,
        "input_ids": np.concatenate([prompt_ids, response_ids], axis=1),
        "attention_mask": attention,
        "position_ids": np.clip(np.cumsum(attention, axis=1) - 1, 0, None),
        "response_mask": response_mask,
        "rollout_log_probs": logprobs,
        "rm_scores": scores,
        "rewards": np.array([s.reward for s in samples], dtype=np.float32),
        "uid": np.array([s.group_id for s in samples], dtype=object),
        "traj_idx": np.array([s.trajectory_index for s in samples], dtype=object),
    }


def _left_padded(prompts: list[list[int]], width: int, pad: int) -> tuple[np.ndarray, np.ndarray]:
    ids = np.full((len(prompts), width), pad, dtype=np.int64)
    attention = np.zeros((len(prompts), width), dtype=np.int64)
    for row, prompt in enumerate(prompts):
        if prompt:
            ids[row, width - len(prompt) :] = prompt
            attention[row, width - len(prompt) :] = 1
    return ids, attention


def _response_rows(
    samples: list[TrainSample], responses: list[list[int]], width: int, pad: int
) -> tuple[np.ndarray, ...]:
    """Right-padded ids, attention, loss mask, rollout logprobs and token-level scores (the reward on the
    last response token)."""
    batch = len(samples)
    ids = np.full((batch, width), pad, dtype=np.int64)
    attention = np.zeros((batch, width), dtype=np.int64)
    mask = np.zeros((batch, width), dtype=np.int64)
    logprobs = np.zeros((batch, width), dtype=np.float32)
    scores = np.zeros((batch, width), dtype=np.float32)
    for row, (sample, response) in enumerate(zip(samples, responses, strict=True)):
        n = len(response)
        ids[row, :n] = response
        attention[row, :n] = 1
        mask[row, :n] = sample.trace.loss_mask[:n]
        logprobs[row, :n] = sample.trace.response_logprobs[:n]
        scores[row, n - 1] = sample.reward  # n == 0: the last column, as veRL's own index -1
    return ids, attention, mask, logprobs, scores


def _fit(ids: list[int], limit: int | None, truncate: bool, what: str, *, keep_tail: bool) -> list[int]:
    if limit is None or len(ids) <= limit:
        return list(ids)
    if not truncate:
        raise ValueError(
            f"{what} of {len(ids)} tokens exceeds max_{what}_length={limit} (pass truncate=True)"
        )
    return list(ids[-limit:]) if keep_tail else list(ids[:limit])
