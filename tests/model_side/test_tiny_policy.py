"""The tiny policy: a random-weight Llama on CPU behind the same HTTP surface (needs torch)."""

from __future__ import annotations

import asyncio
import math

import pytest

from farm.chat.tokenizer import ChatTokenizer
from farm.inference.backend import AsyncBackendClient, BackendClient
from farm.inference.errors import ContextOverflow
from tests.model_side.conftest import ServerProcess

pytest.importorskip("torch")
pytestmark = pytest.mark.integration

MESSAGES = [{"role": "user", "content": "Say something."}]


def test_real_sampling_with_logprobs(tiny_server: ServerProcess, tokenizer: ChatTokenizer) -> None:
    prompt = tokenizer.apply_chat_template(MESSAGES)
    with BackendClient(tiny_server.address) as client:
        first = client.generate(prompt, {"max_tokens": 12, "temperature": 1.0, "seed": 5})
        again = client.generate(prompt, {"max_tokens": 12, "temperature": 1.0, "seed": 5})
        other = client.generate(prompt, {"max_tokens": 12, "temperature": 1.0, "seed": 6})
        greedy = client.generate(prompt, {"max_tokens": 6, "temperature": 0.0})
        top1 = client.generate(prompt, {"max_tokens": 6, "temperature": 1.0, "top_k": 1, "seed": 9})
    assert first.token_ids == again.token_ids and first.logprobs == again.logprobs
    assert first.token_ids != other.token_ids
    assert len(first.token_ids) == 12 or first.token_ids[-1] == tokenizer.eos_token_id
    assert all(v < 0 and math.isfinite(v) for v in first.logprobs)
    assert all(0 <= t < tokenizer.vocab_size for t in first.token_ids)
    # top-k 1 is greedy decoding, and its renormalized distribution is certain.
    assert top1.token_ids == greedy.token_ids and top1.logprobs == [0.0] * 6
    assert all(v < 0 for v in greedy.logprobs)


def test_sglang_path_and_window(tiny_server: ServerProcess, tokenizer: ChatTokenizer) -> None:
    prompt = tokenizer.apply_chat_template(MESSAGES)

    async def main() -> None:
        async with AsyncBackendClient(tiny_server.address, "sglang") as client:
            results = await asyncio.gather(
                *(client.generate(prompt, {"max_tokens": 4, "seed": s}) for s in range(3))
            )
            assert all(len(r.token_ids) == 4 and r.finish_reason == "length" for r in results)
            with pytest.raises(ContextOverflow):
                await client.generate(prompt, {"max_tokens": 600})

    asyncio.run(main())
