"""NeMo-RL `DatumSpec`s (nemo_rl/data/interfaces.py): a message log whose messages carry their `token_ids`.

Every message of the trace is kept, in order. Sampled runs of the response become `assistant` entries
with `generation_logprobs` (what NeMo-RL trains on); each run the farm appended (tool output, user
feedback, template glue) becomes the messages that followed that assistant turn. The farm records one
token span per run, not per message: the run's ids sit on its first message and the others carry
none (`content` keeps every message's text). Likewise the prompt's ids sit on its first message.
NeMo-RL wants torch tensors there: pass `tensor=torch.tensor`; lists otherwise.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from itertools import groupby
from typing import Any

from farm.adapters.samples import Source, TrainSample, flatten
from farm.models import JobState


def to_nemo_rl(
    source: Source, *, tensor: Callable[[list[Any]], Any] | None = None, task_name: str | None = None
) -> list[dict[str, Any]]:
    """One datum per trace.

    `length` is the prompt length (what NeMo-RL's datasets put there before rollout); `idx` the GRPO
    group (samples of one prompt share it); `total_reward` the reward; `loss_multiplier` 0 for jobs
    that did not finish; `task_name` the argument, else the trace's handler; `extra_env_info` the
    trace metadata.
    """
    wrap = tensor or list
    out = []
    for sample in flatten(source):
        metadata = {**sample.trace.metadata, "group_id": sample.group_id, "job_id": sample.job_id}
        out.append(
            {
                "message_log": message_log(sample, wrap),
                "length": len(sample.trace.prompt_ids),
                "loss_multiplier": 1.0 if sample.state is JobState.done else 0.0,
                "extra_env_info": metadata,
                "idx": sample.group_index,
                "task_name": task_name or str(metadata.get("handler") or "farm"),
                "total_reward": sample.reward,
                "reward": sample.reward,
                "traj_idx": sample.trajectory_index,
                "truncated": sample.truncated,
                "metadata": metadata,
            }
        )
    return out


def _runs(mask: list[int]) -> Iterator[tuple[int, int, int]]:
    """(mask value, start, end) of each maximal run."""
    start = 0
    for value, run in groupby(mask):
        length = sum(1 for _ in run)
        yield value, start, start + length
        start += length


def _entries(
    messages: list[dict[str, Any]], ids: list[int], wrap: Callable[[list[Any]], Any], fallback_role: str
) -> list[dict[str, Any]]:
    """One entry per message; the span's ids on the first."""
    if not messages:
        return [{"role": fallback_role, "content": "", "token_ids": wrap(list(ids))}]
    return [
        {
            "role": str(m.get("role", fallback_role)),
            "content": _text(m),
            "token_ids": wrap(list(ids) if i == 0 else []),
        }
        for i, m in enumerate(messages)
    ]


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):  # content parts
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content or "")


def message_log(sample: TrainSample, wrap: Callable[[list[Any]], Any] = list) -> list[dict[str, Any]]:
    trace = sample.trace
    log = _entries(list(trace.prompt_messages), list(trace.prompt_ids), wrap, "user")
    messages = trace.response_messages
    cursor = 0  # next response message not yet placed
    for value, start, end in _runs(trace.loss_mask):
        ids = trace.response_ids[start:end]
        if value:
            while cursor < len(messages) and messages[cursor].get("role") != "assistant":
                cursor += 1  # a non-assistant message with no tokens of its own (should not happen)
            message = messages[cursor] if cursor < len(messages) else {}
            cursor += 1
            log.append(
                {
                    "role": "assistant",
                    "content": _text(message),
                    "token_ids": wrap(list(ids)),
                    "generation_logprobs": wrap(list(trace.response_logprobs[start:end])),
                }
            )
        else:
            following = []
            while cursor < len(messages) and messages[cursor].get("role") != "assistant":
                following.append(messages[cursor])
                cursor += 1
            log.extend(_entries(following, ids, wrap, "tool"))
    return log
