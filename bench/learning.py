"""The trainer side of the learning bench (bench/learn.py) and of examples/farm_grpo.py: a compact GRPO
objective on rollouts from the farm's REST API, the tiny policy's warm start, the trainer-vs-farm logprob
check and weight publishing. Plain torch, every step visible.

What a trainer has to do with the farm's output, and what this code does:
- Recorded logprobs are *after temperature* (log softmax of logits / T, over the full vocabulary when
  top_p = 1 and top_k = -1): recompute with the same T, or the importance ratio is off by the temperature.
- Only tokens with loss_mask 1 were sampled; tool output and template text (mask 0) carry logprob 0.0 and
  must be left out of the loss.
- A rollout may span a weight publish (a partial rollout): the k-th run of mask-1 tokens is the k-th model
  call, sampled by `turn_policy_versions[k]`. The farm's logprobs are then the behaviour policy's, the
  right denominator of a decoupled PPO ratio; the mismatch check compares each turn with the weights that
  produced it, which this loop keeps for a few versions.
- Publishing weights: save a checkpoint, then one `POST /publish_weights` on the farm
  (`FarmClient.publish_weights`): the farm updates every backend through its own server's routes (SGLang's
  pause / update_weights_from_disk / continue, vLLM's pause / reload_weights / resume), confirms the version
  from each server, and only then labels the pool with the `policy_version`: nothing is cleared, no rollout
  is aborted (the answer counts the requests in flight and any abort).
"""

from __future__ import annotations

import copy
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch
from transformers import LlamaForCausalLM

from farm.adapters.sft import IGNORE_INDEX
from farm.chat.tokenizer import ChatTokenizer
from farm.client import FarmClient
from farm.client.groups import Group
from farm.llm.policies.tiny import tiny_config
from farm.models import JobResult, Trace


def build_tiny(tokenizer: ChatTokenizer, seed: int, max_model_len: int = 131072) -> LlamaForCausalLM:
    """The reference LLM's `tiny` architecture (farm/llm/policies/tiny.py) with fresh weights."""
    torch.manual_seed(seed)
    model = LlamaForCausalLM(tiny_config(tokenizer, max_model_len))
    return model.float()


def token_logprobs(
    model: LlamaForCausalLM,
    ids: list[int],
    start: int,
    temperature: float,
    keep: torch.Tensor | None = None,
) -> torch.Tensor:
    """Logprob of ids[start:] given what precedes each, at `temperature` (as the farm records them); with
    `keep` (a bool mask over ids[start:]) only those positions, projected onto the vocabulary only there
    (tool output and template text are never trained, and the projection is the widest layer)."""
    inputs = torch.tensor([ids])
    hidden = model.model(input_ids=inputs).last_hidden_state[0, start - 1 : -1]
    targets = inputs[0, start:]
    if keep is not None:
        hidden, targets = hidden[keep], targets[keep]
    logits = model.lm_head(hidden).float() / temperature
    return torch.log_softmax(logits, dim=-1).gather(-1, targets[:, None])[:, 0]


def turn_of_token(loss_mask: Sequence[int]) -> list[int]:
    """For each response token, the index of the model call it belongs to (-1 for masked tokens)."""
    turns, turn, inside = [], -1, False
    for mask in loss_mask:
        if mask and not inside:
            turn += 1
        inside = bool(mask)
        turns.append(turn if mask else -1)
    return turns


@dataclass
class Mismatch:
    """|trainer logprob - farm logprob| over sampled tokens, each under the weights that sampled it."""

    deltas: list[float] = field(default_factory=list)
    tokens_unchecked: int = 0
    """Sampled tokens whose version the trainer no longer holds (or the trace does not say)."""

    @property
    def max(self) -> float:
        return max(self.deltas, default=float("nan"))

    @property
    def mean(self) -> float:
        return sum(self.deltas) / len(self.deltas) if self.deltas else float("nan")


class Snapshots:
    """The last few published weights, by version, to recompute logprobs of turns from older versions."""

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.models: dict[int, LlamaForCausalLM] = {}

    def add(self, version: int, model: LlamaForCausalLM) -> None:
        frozen = copy.deepcopy(model).eval()
        for p in frozen.parameters():
            p.requires_grad_(False)
        self.models[version] = frozen
        for old in sorted(self.models)[: -self.keep]:
            del self.models[old]


def check_trace(trace: Trace, snapshots: Snapshots, temperature: float, into: Mismatch) -> None:
    versions = trace.metadata.get("turn_policy_versions") or []
    turns = turn_of_token(trace.loss_mask)
    ids = [*trace.prompt_ids, *trace.response_ids]
    start = len(trace.prompt_ids)
    cache: dict[int, torch.Tensor] = {}
    for i, turn in enumerate(turns):
        if turn < 0:
            continue
        version = versions[turn] if turn < len(versions) else None
        model = snapshots.models.get(version) if isinstance(version, int) else None
        if model is None:
            into.tokens_unchecked += 1
            continue
        if version not in cache:
            with torch.no_grad():
                cache[version] = token_logprobs(model, ids, start, temperature)
        into.deltas.append(abs(float(cache[version][i]) - trace.response_logprobs[i]))


def grpo_loss(
    model: LlamaForCausalLM,
    groups: Sequence[Group],
    temperature: float,
    clip: float = 0.2,
    baseline: Literal["group", "zero"] = "group",
) -> tuple[torch.Tensor, int]:
    """Token-level PPO-clip objective; the ratio is new / behaviour (the farm's logprobs). Returns the
    summed loss (divide by the token count) and the count of trained tokens.

    `baseline="group"`: advantages are reward minus the group's mean (Dr. GRPO: no std division, so a group
    where all samples agree contributes nothing). `baseline="zero"`: the advantage is the reward itself
    (REINFORCE without a baseline, still an unbiased gradient); for a 0/1 reward only rewarded episodes are
    trained, pushed up, and nothing is pushed down (expert iteration / RAFT, on-policy). Why it matters
    for a memorised tool call: a failed episode shares most of its tokens with the successes, already
    sampled at p ~ 0.99; with a group baseline its negative advantage pushes them down, which the clip
    lets reach a ratio of 0.8 (p 0.79) within a batch, while a success can raise them by at most 0.01."""
    losses: list[torch.Tensor] = []
    tokens = 0
    for group in groups:
        mean = sum(group.rewards) / len(group.rewards) if baseline == "group" else 0.0
        for result, reward in zip(group.results, group.rewards, strict=True):
            advantage = reward - mean
            if abs(advantage) < 1e-9:
                continue
            for trace in result.trajectory.traces:
                mask = torch.tensor(trace.loss_mask, dtype=torch.bool)
                if not mask.any():
                    continue
                ids = [*trace.prompt_ids, *trace.response_ids]
                new = token_logprobs(model, ids, len(trace.prompt_ids), temperature, mask)
                old = torch.tensor(trace.response_logprobs)[mask]
                ratio = torch.exp(new - old)
                clipped = torch.clamp(ratio, 1 - clip, 1 + clip)
                losses.append(-torch.minimum(ratio * advantage, clipped * advantage).sum())
                tokens += int(mask.sum())
    if not losses:
        return torch.zeros((), requires_grad=True), 0
    return torch.stack(losses).sum(), tokens


def sft_loss(model: LlamaForCausalLM, record: dict[str, Any]) -> tuple[torch.Tensor, float]:
    """Cross-entropy on the labelled tokens of one `to_sft_records(style="tokens")` record; also the
    logprob of the whole labelled sequence (its chance of being sampled at T=1)."""
    ids, labels = record["input_ids"], record["labels"]
    targets = torch.tensor(labels[1:])
    keep = targets != IGNORE_INDEX
    hidden = model.model(input_ids=torch.tensor([ids])).last_hidden_state[0, :-1][keep]
    logits = model.lm_head(hidden).float()  # only where a label is: the vocabulary projection dominates
    logprobs = torch.log_softmax(logits, dim=-1).gather(-1, targets[keep][:, None])[:, 0]
    return -logprobs.mean(), float(logprobs.detach().sum())


def warm_start(
    model: LlamaForCausalLM, records: Sequence[dict[str, Any]], target: float, lr: float, max_epochs: int
) -> tuple[int, float, torch.optim.Adam]:
    """SFT until the least likely recorded successful episode has a chance of `target` of being sampled
    (so RL starts from a policy that succeeds now and then on every question, not always). Returns
    (epochs, the mean chance, the optimizer: RL continues with its moments, since a fresh Adam's first
    steps move every weight by about lr)."""
    optimizer = torch.optim.Adam(model.parameters(), lr=lr)
    chance = 0.0
    for epoch in range(1, max_epochs + 1):
        chances = []
        for record in records:
            loss, logprob = sft_loss(model, record)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            chances.append(math.exp(logprob))
        chance = sum(chances) / len(chances)
        if min(chances) >= target:
            return epoch, chance, optimizer
    return max_epochs, chance, optimizer


@dataclass
class Publisher:
    """Publishes the trainer's weights through the farm (POST /publish_weights): every backend of the pool is
    updated in its own server's protocol and labelled with the version once its server confirms it."""

    farm: FarmClient
    servers: list[str]
    """The servers (as registered: `http://host:port/v1`, or an SGLang root), registered with version 0
    at the first publish when the pool does not hold them yet."""
    directory: Path
    kind: str = "sglang"
    seconds: float = 0.0
    in_flight: int = 0
    """Model calls in flight across all publishes (each paused, never aborted)."""
    aborted: int = 0
    """Requests the servers aborted across all publishes (vLLM counts them; SGLang does not say)."""
    publishes: int = 0

    def publish(self, model: LlamaForCausalLM, version: int) -> None:
        started = time.monotonic()
        path = self.directory / f"v{version}"
        model.save_pretrained(path)
        registered = {b.address for b in self.farm.llm_servers()}
        for server in self.servers:
            if server.rstrip("/") not in registered:
                self.farm.add_llm_server(server, kind=self.kind)
        result = self.farm.publish_weights(version, str(path), addresses=self.servers)
        unconfirmed = [b for b in result.backends if not b.confirmed]
        if unconfirmed:
            raise RuntimeError(
                f"weights v{version} not confirmed: {[(b.address, b.reason) for b in unconfirmed]}"
            )
        self.publishes += 1
        self.in_flight += result.in_flight
        self.aborted += result.aborted or 0
        self.seconds += time.monotonic() - started


def tool_calls(result: JobResult) -> int:
    return sum(int(t.metadata.get("tool_calls") or 0) for t in result.trajectory.traces)


def through_the_tool(group: Group) -> Group:
    """The task's reward: the evaluator's, counted only when the episode called the tool (a policy that
    memorised the answer of a fixed question would otherwise be paid for skipping the sandbox)."""
    rewards = [w if tool_calls(r) >= 1 else 0.0 for r, w in zip(group.results, group.rewards, strict=True)]
    return group.model_copy(update={"rewards": rewards})


def episode_stats(results: Sequence[JobResult], rewards: Sequence[float]) -> dict[str, float]:
    """Mean trained reward and evaluator reward, tool calls per episode and per successful episode."""
    calls = [tool_calls(r) for r in results]
    scored = [r.reward if r.reward is not None else 0.0 for r in results]
    wins = [c for c, w in zip(calls, rewards, strict=True) if w > 0]
    return {
        "reward": sum(rewards) / len(rewards) if rewards else float("nan"),
        "evaluator_reward": sum(scored) / len(scored) if scored else float("nan"),
        "tool_calls": sum(calls) / len(calls) if calls else float("nan"),
        "tool_calls_success": sum(wins) / len(wins) if wins else float("nan"),
        "successes": float(len(wins)),
    }
