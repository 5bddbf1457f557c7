"""The serving core: context-window checks, the policy call off the event loop, simulated latency."""

from __future__ import annotations

import asyncio
import math
import random
from collections.abc import AsyncIterator

import anyio.to_thread

from farm.chat.tokenizer import ChatTokenizer
from farm.llm.config import ServerConfig
from farm.llm.policies.base import Policy
from farm.llm.sampling import Sample, SamplingRequest


class ContextWindowExceeded(ValueError):
    """Prompt plus max_tokens do not fit; the message is vLLM's, so clients classify it the same way."""


class Engine:
    def __init__(self, config: ServerConfig, tokenizer: ChatTokenizer, policy: Policy) -> None:
        self.config = config
        self.tokenizer = tokenizer
        self.policy = policy
        self.model_name = config.served_model_name or tokenizer.name
        self._rng = random.Random(config.seed)

    def resolve_max_tokens(self, prompt_len: int, max_tokens: int | None) -> int:
        """The budget for one call; raises ContextWindowExceeded as vLLM's validation would."""
        limit = self.config.max_model_len
        if prompt_len == 0:
            raise ValueError("the prompt is empty")
        if prompt_len >= limit:
            raise ContextWindowExceeded(
                f"This model's maximum context length is {limit} tokens. However, your request has "
                f"{prompt_len} input tokens. Please reduce the length of the input messages."
            )
        if max_tokens is None:
            return limit - prompt_len
        if prompt_len + max_tokens > limit:
            raise ContextWindowExceeded(
                f"'max_tokens' or 'max_completion_tokens' is too large: {max_tokens}. This model's maximum "
                f"context length is {limit} tokens and your request has {prompt_len} input tokens "
                f"({max_tokens} > {limit} - {prompt_len})."
            )
        return max_tokens

    def latency_factor(self, seed: int | None) -> float:
        """How much slower than nominal this request runs (the long tail); 1.0 when sigma is 0."""
        sigma = self.config.latency_sigma
        if sigma == 0:
            return 1.0
        rng = random.Random(seed) if seed is not None else self._rng
        return math.exp(sigma * rng.gauss(0.0, 1.0) - sigma * sigma / 2)

    async def generate(self, prompt_ids: list[int], sampling: SamplingRequest) -> Sample:
        sample = await anyio.to_thread.run_sync(self.policy.sample, prompt_ids, sampling)
        delay = self.config.prefill_latency_ms + self.config.token_latency_ms * len(sample.token_ids)
        if delay > 0:
            await asyncio.sleep(delay * self.latency_factor(sampling.seed) / 1000)
        return sample

    async def stream(
        self, prompt_ids: list[int], sampling: SamplingRequest
    ) -> AsyncIterator[tuple[int, Sample]]:
        """Yield (count of tokens released so far, full sample) paced like a real decode loop."""
        sample = await anyio.to_thread.run_sync(self.policy.sample, prompt_ids, sampling)
        factor = self.latency_factor(sampling.seed)
        if self.config.prefill_latency_ms:
            await asyncio.sleep(self.config.prefill_latency_ms * factor / 1000)
        for released in range(1, len(sample.token_ids) + 1):
            if self.config.token_latency_ms:
                await asyncio.sleep(self.config.token_latency_ms * factor / 1000)
            yield released, sample
