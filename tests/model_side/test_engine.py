"""The serving core without HTTP: context-window checks and simulated latency."""

from __future__ import annotations

import asyncio
import time

import pytest

from farm.chat.tokenizer import ChatTokenizer
from farm.llm.config import ServerConfig
from farm.llm.engine import ContextWindowExceeded, Engine
from farm.llm.policies.scripted import ScriptedPolicy
from farm.llm.policies.scripts import ScriptBook
from farm.llm.sampling import SamplingRequest


def _engine(tokenizer: ChatTokenizer, **settings: float) -> Engine:
    config = ServerConfig(max_model_len=64, **settings)
    return Engine(config, tokenizer, ScriptedPolicy(tokenizer, ScriptBook([]), accuracy=1.0))


def test_context_window_rules(tokenizer: ChatTokenizer) -> None:
    engine = _engine(tokenizer)
    assert engine.resolve_max_tokens(10, None) == 54
    assert engine.resolve_max_tokens(10, 54) == 54
    with pytest.raises(ContextWindowExceeded, match=r"too large: 55.*\(55 > 64 - 10\)"):
        engine.resolve_max_tokens(10, 55)
    with pytest.raises(ContextWindowExceeded, match="your request has 64 input tokens"):
        engine.resolve_max_tokens(64, None)
    with pytest.raises(ValueError, match="empty"):
        engine.resolve_max_tokens(0, 1)


def test_latency_is_prefill_plus_per_token(tokenizer: ChatTokenizer) -> None:
    engine = _engine(tokenizer, token_latency_ms=15.0, prefill_latency_ms=60.0)
    prompt = tokenizer.apply_chat_template([{"role": "user", "content": "Write a poem."}])

    async def timed() -> tuple[float, int]:
        started = time.perf_counter()
        sample = await engine.generate(prompt, SamplingRequest(max_tokens=40))
        return time.perf_counter() - started, len(sample.token_ids)

    elapsed, n = asyncio.run(timed())
    assert elapsed >= (60 + 15 * n) / 1000

    async def streamed() -> list[int]:
        return [released async for released, _ in engine.stream(prompt, SamplingRequest(max_tokens=40))]

    assert asyncio.run(streamed()) == list(range(1, n + 1))


def test_long_tail_factor_is_seeded_mean_one_and_heavy(tokenizer: ChatTokenizer) -> None:
    engine = _engine(tokenizer, latency_sigma=1.5)
    factors = [engine.latency_factor(seed) for seed in range(20_000)]
    assert engine.latency_factor(7) == engine.latency_factor(7)  # same seed, same straggler
    mean = sum(factors) / len(factors)
    assert 0.8 < mean < 1.2  # throughput unchanged on average
    ordered = sorted(factors)
    assert ordered[len(ordered) // 2] < 0.5 < 5 < ordered[int(len(ordered) * 0.99)]  # most fast, a few slow
    assert _engine(tokenizer).latency_factor(7) == 1.0
