"""Example: a compact GRPO loop that trains a policy on rollouts from a running farm, in plain torch.

    farm up                                                        # the farm, on 127.0.0.1:8000
    farm llm serve --policy tiny --emulate sglang --port 8001     # the policy's server (SGLang's routes)
    python -m examples.farm_grpo --farm http://127.0.0.1:8000 --server http://127.0.0.1:8001

Each step takes a batch of groups from the DAPO consumer (math tasks through the REST API, the python tool
in the sandbox, the handler's reward), trains the PPO-clipped token-level objective against the farm's
recorded logprobs, and publishes the new weights through the farm (POST /publish_weights), which updates
the server in place and labels the pool with the new policy_version. The pieces are bench/learning.py's.
Random `tiny` weights rarely earn a reward; `python -m bench.learn` runs this loop after a supervised warm
start, on a farm of its own, and measures it (docs/PERFORMANCE.md).
"""

from __future__ import annotations

import argparse
import itertools
import json
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import torch

from bench.learning import Publisher, build_tiny, grpo_loss
from farm.chat.tokenizer import ChatTokenizer
from farm.client import DapoConfig, DapoConsumer, FarmClient

TEMPERATURE = 1.0


def math_tasks() -> Iterator[dict[str, Any]]:
    """The math handler's sample suite, over and over."""
    text = (Path(__file__).resolve().parents[1] / "handlers" / "math" / "problems.jsonl").read_text()
    problems = [json.loads(line) for line in text.splitlines() if line.strip()]
    for problem in itertools.cycle(problems):
        yield {"handler": "math", "question": problem["question"], "answer": problem["answer"]}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--farm", default="http://127.0.0.1:8000", help="the farm's API")
    parser.add_argument("--server", default="http://127.0.0.1:8001", help="the policy's server")
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--groups", type=int, default=2, help="groups per batch")
    parser.add_argument("--n", type=int, default=8, help="samples per group")
    parser.add_argument("--lr", type=float, default=2e-3)
    args = parser.parse_args(argv)

    model = build_tiny(
        ChatTokenizer.load(None), seed=0
    )  # the architecture `farm llm serve --policy tiny` runs
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    config = DapoConfig(
        n=args.n,
        concurrency=args.groups * args.n,
        sampling_params={"temperature": TEMPERATURE, "max_tokens": 64},
    )
    with FarmClient(args.farm) as farm, tempfile.TemporaryDirectory() as checkpoints:
        publisher = Publisher(farm, [args.server], Path(checkpoints))
        publisher.publish(model, 0)  # the server now holds the trainer's weights, labelled version 0
        with DapoConsumer(args.farm, math_tasks(), config) as dapo:
            for step in range(1, args.steps + 1):
                batch = dapo.next_batch(args.groups, policy_version=step - 1)
                loss, tokens = grpo_loss(model, batch.groups, TEMPERATURE)
                if tokens:
                    optimizer.zero_grad()
                    (loss / tokens).backward()
                    optimizer.step()
                publisher.publish(model, step)
                rewards = [w for group in batch.groups for w in group.rewards]
                print(f"step {step}: mean reward {sum(rewards) / len(rewards):.2f}, {tokens} tokens trained")


if __name__ == "__main__":
    main()
