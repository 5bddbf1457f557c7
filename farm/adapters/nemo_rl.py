"""NeMo-RL message logs: per sample, a list of messages each carrying its own `token_ids`.

The prompt is one entry; the response is split where the loss mask changes: sampled runs become
`assistant` entries with `generation_logprobs`, unmasked runs (tool output, template glue) `tool`
entries. NeMo-RL wants torch tensors there: pass `tensor=torch.tensor`; lists otherwise.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from itertools import groupby
from typing import Any

from farm.adapters.samples import Source, TrainSample, flatten


def to_nemo_rl(source: Source, *, tensor: Callable[[list[Any]], Any] | None = None) -> list[dict[str, Any]]:
    """One datum per trace: {message_log, reward, idx (group), traj_idx, truncated, metadata}."""
    wrap = tensor or list
    return [
        {
            "message_log": message_log(sample, wrap),
            "reward": sample.reward,
            "idx": sample.group_index,
            "traj_idx": sample.trajectory_index,
            "truncated": sample.truncated,
            "metadata": {**sample.trace.metadata, "group_id": sample.group_id, "job_id": sample.job_id},
        }
        for sample in flatten(source)
    ]


def _runs(mask: list[int]) -> Iterator[tuple[int, int, int]]:
    """(mask value, start, end) of each maximal run."""
    start = 0
    for value, run in groupby(mask):
        length = sum(1 for _ in run)
        yield value, start, start + length
        start += length


def message_log(sample: TrainSample, wrap: Callable[[list[Any]], Any] = list) -> list[dict[str, Any]]:
    trace = sample.trace
    prompt_role = trace.prompt_messages[-1].get("role", "user") if trace.prompt_messages else "user"
    log: list[dict[str, Any]] = [
        {
            "role": prompt_role,
            "content": "\n".join(str(m.get("content") or "") for m in trace.prompt_messages),
            "token_ids": wrap(list(trace.prompt_ids)),
        }
    ]
    assistant_texts = iter(m for m in trace.response_messages if m.get("role") == "assistant")
    other_texts = iter(m for m in trace.response_messages if m.get("role") != "assistant")
    for value, start, end in _runs(trace.loss_mask):
        ids = trace.response_ids[start:end]
        if value:
            message = next(assistant_texts, {})
            log.append(
                {
                    "role": "assistant",
                    "content": str(message.get("content") or ""),
                    "token_ids": wrap(list(ids)),
                    "generation_logprobs": wrap(list(trace.response_logprobs[start:end])),
                }
            )
        else:
            message = next(other_texts, {})
            log.append(
                {
                    "role": str(message.get("role", "tool")),
                    "content": str(message.get("content") or ""),
                    "token_ids": wrap(list(ids)),
                }
            )
    return log
