"""SFT export for offline data generation (seed 001 §4.2): keep accepted trajectories, write JSONL."""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any, Literal

from farm.adapters.samples import Source, flatten
from farm.adapters.termination import TerminationRules
from farm.models import JobState

IGNORE_INDEX = -100
"""Label value that HF-style losses skip."""


def to_sft_records(
    source: Source,
    *,
    min_reward: float | None = None,
    style: Literal["messages", "tokens"] = "messages",
    termination: TerminationRules | None = None,
) -> list[dict[str, Any]]:
    """Finished traces with reward >= `min_reward` (None: all finished ones).

    `messages`: chat records {messages, tools, reward, metadata} for a chat-template SFT trainer.
    `tokens`: the exact sampled ids {input_ids, labels, reward, metadata}; labels are IGNORE_INDEX on the
    prompt and on every response token the policy did not sample (tool output).
    """
    records = []
    for sample in flatten(source, termination):
        if sample.state is not JobState.done or (min_reward is not None and sample.reward < min_reward):
            continue
        trace = sample.trace
        metadata = {**trace.metadata, "group_id": sample.group_id, "job_id": sample.job_id}
        if style == "messages":
            records.append(
                {
                    "messages": [*trace.prompt_messages, *trace.response_messages],
                    "tools": list(trace.tools),
                    "reward": sample.reward,
                    "metadata": metadata,
                }
            )
        else:
            labels = [IGNORE_INDEX] * len(trace.prompt_ids) + [
                token if mask else IGNORE_INDEX
                for token, mask in zip(trace.response_ids, trace.loss_mask, strict=True)
            ]
            records.append(
                {
                    "input_ids": [*trace.prompt_ids, *trace.response_ids],
                    "labels": labels,
                    "reward": sample.reward,
                    "metadata": metadata,
                }
            )
    return records


def write_jsonl(records: Iterable[dict[str, Any]], path: str | Path) -> int:
    """Write one JSON object per line; returns the number written."""
    count = 0
    with Path(path).open("w", encoding="utf-8") as out:
        for record in records:
            out.write(json.dumps(record, ensure_ascii=False) + "\n")
            count += 1
    return count
