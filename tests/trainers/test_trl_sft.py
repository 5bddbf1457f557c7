"""TRL's SFTTrainer accepts the farm's SFT export: TRL needs torch (via accelerate), which the test install
keeps out, so this checker follows TRL's dataset preparation, written from reading its code, and runs
its tokenization step with the real `transformers` tokenizer of the farm.

Rules encoded (huggingface/trl @ f2cd57710ae345ea6428ae95363267fcf38a3dc8):
- trl/data_utils.py `is_conversational`: a `messages` key whose value is a list of dicts with `role`.
- trl/trainer/sft_trainer.py `_prepare_dataset` / `tokenize_fn`: conversational language-modeling rows
  are tokenized with `apply_chat_template(messages, tools=tools)` (tools may be a JSON string); rows that
  already hold `input_ids` are taken as processed, and a `labels` column is kept as it is (-100 ignored).
- A dataset column has one type across rows (Arrow), so every row has the same keys.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from farm.adapters import IGNORE_INDEX, to_sft_records, write_jsonl
from tests.trainers import farm_rollouts


def is_conversational(example: dict[str, Any]) -> bool:
    messages = example.get("messages")
    return (
        isinstance(messages, list)
        and bool(messages)
        and isinstance(messages[0], dict)
        and "role" in messages[0]
    )


def tokenize(example: dict[str, Any]) -> list[int]:
    """TRL's language-modeling tokenization of a conversational row."""
    tools = example.get("tools")
    tools = json.loads(tools) if isinstance(tools, str) else tools
    hf = farm_rollouts.tokenizer().hf
    return list(
        hf.apply_chat_template(example["messages"], tools=tools or None, tokenize=True, return_dict=True)[
            "input_ids"
        ]
    )


def test_trl_tokenizes_the_messages_dataset_back_to_the_sampled_tokens(tmp_path: Path) -> None:
    results = farm_rollouts.results()
    records = to_sft_records(results, min_reward=1.0)
    assert len(records) == 2  # the rewarded sample of each group
    path = tmp_path / "sft.jsonl"
    write_jsonl(records, path)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    assert len({tuple(sorted(r)) for r in rows}) == 1
    for row, record in zip(rows, records, strict=True):
        assert is_conversational(row)
        roles = [m["role"] for m in row["messages"]]
        assert roles.count("tool") == 4 and roles.count("user") == 3
        trace = next(
            t
            for r in results
            for t in r.trajectory.traces
            if t.metadata["job_id"] == record["metadata"]["job_id"]
        )
        sampled = trace.prompt_ids + trace.response_ids
        ids = tokenize(row)
        # The template closes the conversation with a newline after the last end-of-turn token.
        assert ids[: len(sampled)] == sampled
        assert not farm_rollouts.tokenizer().decode(ids[len(sampled) :]).strip()
        assert tokenize({**row, "tools": json.dumps(row["tools"])}) == tokenize(row)


def test_pre_tokenized_rows_keep_their_labels() -> None:
    rows = to_sft_records(farm_rollouts.results(), style="tokens")
    assert len(rows) == sum(len(r.trajectory.traces) for r in farm_rollouts.results())
    for row in rows:
        assert "input_ids" in row and len(row["labels"]) == len(row["input_ids"])
        trained = [
            t for t, label in zip(row["input_ids"], row["labels"], strict=True) if label != IGNORE_INDEX
        ]
        assert trained and all(
            label in (IGNORE_INDEX, t) for t, label in zip(row["input_ids"], row["labels"], strict=True)
        )
