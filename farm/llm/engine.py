"""The serving core: context-window checks, the policy call off the event loop, simulated latency and
finish faults."""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import AsyncIterator

import anyio.to_thread

from farm.chat.tokenizer import ChatTokenizer
from farm.llm import emulation
from farm.llm.config import ServerConfig
from farm.llm.emulation import ContextWindowExceeded
from farm.llm.policies.base import Policy
from farm.llm.sampling import Sample, SamplingRequest

__all__ = ["ContextWindowExceeded", "Engine", "with_fault"]


class Engine:
    def __init__(self, config: ServerConfig, tokenizer: ChatTokenizer, policy: Policy) -> None:
        self.config = config
        self.tokenizer = tokenizer
        self.policy = policy
        self.model_name = config.served_model_name or tokenizer.name
        self._rng = random.Random(config.seed)
        self.gate: asyncio.Event | None = None
        """Set while generating; vLLM-style /pause clears it and new requests wait (farm/llm/weights.py)."""
        self._version_label = "default"
        """SGLang's weight_version for a policy without weights (set by /update_weight_version)."""
        self.finished: dict[str, int] = {}
        """Requests finished, by finish reason (vLLM's `vllm:request_success_total`, aborts included)."""

    def metrics_text(self) -> str:
        """vLLM's finished-request counter in Prometheus text, one sample per reason (always `abort` too)."""
        name = "vllm:request_success_total"
        lines = [f"# HELP {name} Count of successfully processed requests.", f"# TYPE {name} counter"]
        for reason in sorted({"stop", "length", "abort", *self.finished}):
            labels = f'engine="0",finished_reason="{reason}",model_name="{self.model_name}"'
            lines.append(f"{name}{{{labels}}} {float(self.finished.get(reason, 0))}")
        return "\n".join(lines) + "\n"

    def count_finished(self, sample: Sample) -> None:
        reason = sample.finish_reason or "stop"
        self.finished[reason] = self.finished.get(reason, 0) + 1

    @property
    def weight_version(self) -> str:
        version = getattr(self.policy, "weight_version", None)
        return version if isinstance(version, str) else self._version_label

    def set_weight_version(self, version: str) -> None:
        if hasattr(self.policy, "weight_version"):
            self.policy.weight_version = version
        else:
            self._version_label = version

    async def update_weights_from_disk(self, model_path: str, weight_version: str | None) -> None:
        """Load a checkpoint in place (no restart); ValueError when the policy has no weights or the
        checkpoint does not fit. Requests in flight are not aborted: each finishes on one version."""
        load = getattr(self.policy, "load_weights", None)
        if load is None:
            raise ValueError(f"the {self.policy.name} policy has no weights to load")
        await anyio.to_thread.run_sync(load, model_path, weight_version)

    def resolve_max_tokens(self, prompt_len: int, max_tokens: int | None) -> int:
        """The budget for one call; raises ContextWindowExceeded as the emulated server would."""
        window = self.config.max_model_len
        return emulation.resolve_max_tokens(
            self.config.emulate, window, prompt_len, max_tokens, clamp=self.config.over_window == "clamp"
        )

    def latency_factor(self, seed: int | None) -> float:
        """How much slower than nominal this request runs (the long tail); 1.0 when sigma is 0."""
        sigma = self.config.latency_sigma
        if sigma == 0:
            return 1.0
        rng = random.Random(seed) if seed is not None else self._rng
        return math.exp(sigma * rng.gauss(0.0, 1.0) - sigma * sigma / 2)

    def finish_fault(self, seed: int | None) -> str | None:
        """Which configured fault (if any) ends this request; a seeded request always draws the same."""
        faults = self.config.finish_faults
        if not faults:
            return None
        rng = random.Random(f"fault:{self.config.seed}:{seed}") if seed is not None else self._rng
        draw, acc = rng.random(), 0.0
        for reason, chance in sorted(faults.items()):
            acc += chance
            if draw < acc:
                return reason
        return None

    def _sample(self, prompt_ids: list[int], sampling: SamplingRequest) -> Sample:
        sample = self.policy.sample(prompt_ids, sampling)
        if sample.weight_version is None:
            sample.weight_version = self._version_label
        fault = self.finish_fault(sampling.seed)
        if fault is not None:
            sample = with_fault(self.tokenizer, sample, fault)
        self.count_finished(sample)
        return sample

    async def generate(self, prompt_ids: list[int], sampling: SamplingRequest) -> Sample:
        if self.gate is not None:
            await self.gate.wait()
        sample = await anyio.to_thread.run_sync(self._sample, prompt_ids, sampling)
        delay = self.config.prefill_latency_ms + self.config.token_latency_ms * len(sample.token_ids)
        if delay > 0:
            await asyncio.sleep(delay * self.latency_factor(sampling.seed) / 1000)
        return sample

    async def stream(
        self, prompt_ids: list[int], sampling: SamplingRequest
    ) -> AsyncIterator[tuple[int, Sample]]:
        """Yield (count of tokens released so far, full sample) paced like a real decode loop."""
        if self.gate is not None:
            await self.gate.wait()
        sample = await anyio.to_thread.run_sync(self._sample, prompt_ids, sampling)
        factor = self.latency_factor(sampling.seed)
        if self.config.prefill_latency_ms:
            await asyncio.sleep(self.config.prefill_latency_ms * factor / 1000)
        for released in range(1, len(sample.token_ids) + 1):
            if self.config.token_latency_ms:
                await asyncio.sleep(self.config.token_latency_ms * factor / 1000)
            yield released, sample


def with_fault(tokenizer: ChatTokenizer, sample: Sample, fault: str) -> Sample:
    """`abort`: the engine dropped the request midway, so only the first half of the output exists.
    `repetition`: vLLM's repetition detector ended it; the output is kept."""
    if fault == "abort":
        kept = len(sample.token_ids) // 2
        ids = sample.token_ids[:kept]
        text = tokenizer.decode(ids)
        return Sample(ids, sample.logprobs[:kept], "abort", None, text, sample.weight_version)
    return Sample(sample.token_ids, sample.logprobs, fault, None, sample.text, sample.weight_version)
