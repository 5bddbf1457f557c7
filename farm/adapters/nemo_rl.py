"""NeMo-RL `DatumSpec`s (nemo_rl/data/interfaces.py): a message log whose messages carry their `token_ids`.

Every message of the trace is kept, in order. Sampled runs of the response become `assistant` entries
with `generation_logprobs` (what NeMo-RL trains on); each run the farm appended (tool output, user
feedback, template glue) becomes the messages that followed that assistant turn. The farm records one
token span per run, not per message, so a run is cut after each end-of-turn token: when that gives one
piece per message (chat templates that close every turn with it) each message gets its own ids, the
template's trailing glue riding on the last. Otherwise the run stays one entry (NeMo-RL's own shape
for an environment step) whose `content` joins every message's text and whose `messages` lists them.
The prompt is split the same way. No entry has empty ids (`torch.tensor([])` is float and would turn
the concatenated ids float). NeMo-RL wants torch tensors there: pass `tensor=torch.tensor`; lists
otherwise.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from itertools import groupby
from typing import Any

from farm.adapters.samples import Source, TrainSample, flatten
from farm.adapters.termination import TerminationRules
from farm.models import JobState


def to_nemo_rl(
    source: Source,
    *,
    tensor: Callable[[list[Any]], Any] | None = None,
    task_name: str | None = None,
    termination: TerminationRules | None = None,
) -> list[dict[str, Any]]:
    """One datum per trace.

    `length` is the prompt length (what NeMo-RL's datasets put there before rollout); `idx` the GRPO
    group (samples of one prompt share it); `total_reward` the reward; `loss_multiplier` 0 for jobs
    that did not finish; `task_name` the argument, else the trace's handler; `extra_env_info` the
    trace metadata.
    """
    wrap = tensor or list
    out = []
    for sample in flatten(source, termination):
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


def _pieces(ids: list[int], eot: int | None, count: int) -> list[list[int]] | None:
    """`ids` cut after each `eot`, trailing glue joined to the last piece; None unless `count` pieces."""
    if eot is None or count == 0:
        return None
    pieces: list[list[int]] = [[]]
    for token in ids:
        pieces[-1].append(token)
        if token == eot:
            pieces.append([])
    if pieces[0] == [eot] and len(pieces) > 1:  # the end-of-turn token that closes a cut turn
        pieces[1] = [eot, *pieces[1]]
        pieces.pop(0)
    if len(pieces) > 1 and len(pieces) == count + 1:
        pieces[-2].extend(pieces.pop())
    return pieces if len(pieces) == count and all(pieces) else None


def _entries(
    messages: list[dict[str, Any]],
    ids: list[int],
    wrap: Callable[[list[Any]], Any],
    fallback_role: str,
    eot: int | None,
) -> list[dict[str, Any]]:
    pieces = _pieces(ids, eot, len(messages))
    if pieces is not None:
        return [
            {"role": str(m.get("role", fallback_role)), "content": _text(m), "token_ids": wrap(piece)}
            for m, piece in zip(messages, pieces, strict=True)
        ]
    entry: dict[str, Any] = {
        "role": str(messages[0].get("role", fallback_role)) if messages else fallback_role,
        "content": "\n".join(_text(m) for m in messages),
        "token_ids": wrap(list(ids)),
    }
    if len(messages) > 1:
        entry["messages"] = list(messages)
    return [entry]


def _end_of_turn(trace: Any) -> int | None:
    """The end-of-turn id: what every sampled turn that stopped on its own ends with."""
    ends = {
        trace.response_ids[end - 1]
        for value, _, end in _runs(trace.loss_mask)
        if value and end < len(trace.response_ids)  # followed by appended messages: it stopped
    }
    if trace.finish_reason not in ("length", "context_window") and trace.loss_mask and trace.loss_mask[-1]:
        ends.add(trace.response_ids[-1])
    return ends.pop() if len(ends) == 1 else None


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):  # content parts
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content or "")


def message_log(sample: TrainSample, wrap: Callable[[list[Any]], Any] = list) -> list[dict[str, Any]]:
    trace = sample.trace
    eot = _end_of_turn(trace)
    log = _entries(list(trace.prompt_messages), list(trace.prompt_ids), wrap, "user", eot)
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
            log.extend(_entries(following, list(ids), wrap, "tool", eot))
    return log
