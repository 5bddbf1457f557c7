"""The tiny policy: a small Llama-shaped causal LM with random weights from a fixed seed.

Real forward passes on CPU (with a KV cache), real temperature / top-k / top-p sampling and real
logprobs, so token-level plumbing is exercised against an actual model. The reported logprob is that of
the sampled token under the distribution it was drawn from (after temperature and truncation), like
vLLM's `--logprobs-mode processed_logprobs`; greedy decoding (temperature 0) reports the raw logprob.
torch is an optional extra (`pip install rollout-farm[model]`), imported only when this policy is built.
"""

from __future__ import annotations

import random
import threading
from typing import Any

from farm.chat.tokenizer import ChatTokenizer
from farm.llm.sampling import Sample, SamplingRequest, StopChecker


def _import_torch() -> Any:
    try:
        import torch  # type: ignore[import-not-found,unused-ignore]
    except ImportError as exc:
        raise RuntimeError(
            "the `tiny` policy needs torch: pip install 'rollout-farm[model]' (torch==2.13.0, CPU wheel)"
        ) from exc
    return torch


def tiny_config(tokenizer: ChatTokenizer, max_model_len: int = 8192, hidden_size: int = 64,
                layers: int = 2) -> Any:  # fmt: skip
    """The architecture of the `tiny` policy; a trainer builds the same model to train it."""
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=tokenizer.vocab_size,
        hidden_size=hidden_size,
        intermediate_size=hidden_size * 2,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=max_model_len,
        bos_token_id=None,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.hf.pad_token_id,
        tie_word_embeddings=True,
    )


class TinyPolicy:
    name = "tiny"

    def __init__(self, tokenizer: ChatTokenizer, seed: int = 0, max_model_len: int = 8192,
                 hidden_size: int = 64, layers: int = 2) -> None:  # fmt: skip
        torch = _import_torch()
        from transformers import LlamaForCausalLM

        self.torch = torch
        self.tokenizer = tokenizer
        torch.set_num_threads(1)  # the machines are shared; one core per forward pass is plenty here
        torch.manual_seed(seed)
        config = tiny_config(tokenizer, max_model_len, hidden_size, layers)
        self.model = LlamaForCausalLM(config).eval()  # type: ignore[no-untyped-call,unused-ignore]
        self._rng = random.Random(seed)
        self._lock = threading.Lock()
        self.weight_version = "default"
        """The label of the weights now loaded (SGLang's `weight_version`; "default" until an update)."""

    def load_weights(self, model_path: str, weight_version: str | None) -> None:
        """Swap in the weights of a Hugging Face checkpoint directory of the same architecture. Waits
        for the sample in progress (it finishes on the weights it began with, as after SGLang's
        `pause_generation(mode="in_place")`); raises ValueError when the checkpoint does not fit."""
        from transformers import LlamaForCausalLM

        try:
            loaded = LlamaForCausalLM.from_pretrained(model_path, dtype=self.torch.float32)
        except (OSError, ValueError) as exc:
            raise ValueError(f"cannot load {model_path}: {exc}") from None
        if not _same_shape(loaded, self.model):
            raise ValueError(f"{model_path}: the checkpoint's architecture differs from the served model")
        loaded.eval()  # type: ignore[no-untyped-call,unused-ignore]
        with self._lock:
            self.model = loaded
            if weight_version is not None:
                self.weight_version = weight_version

    def sample(self, prompt_ids: list[int], sampling: SamplingRequest) -> Sample:
        """Under the lock from first to last token: one sample never mixes two weight versions."""
        torch = self.torch
        if sampling.seed is not None:
            seed = sampling.seed
        else:
            with self._lock:
                seed = self._rng.getrandbits(63)
        generator = torch.Generator().manual_seed(seed)
        checker = StopChecker(self.tokenizer, sampling)
        with self._lock, torch.inference_mode():
            out = self.model(input_ids=torch.tensor([prompt_ids]), use_cache=True)
            while True:
                token_id, logprob = self._pick(out.logits[0, -1].float(), sampling, generator)
                if checker.feed(token_id, logprob):
                    checker.sample.weight_version = self.weight_version
                    return checker.sample
                out = self.model(
                    input_ids=torch.tensor([[token_id]]), past_key_values=out.past_key_values, use_cache=True
                )

    def _pick(self, logits: Any, sampling: SamplingRequest, generator: Any) -> tuple[int, float]:
        torch = self.torch
        if sampling.temperature == 0.0:
            logprobs = torch.log_softmax(logits, dim=-1)
            token_id = int(torch.argmax(logprobs))
            return token_id, float(logprobs[token_id])
        logits = logits / sampling.temperature
        if 0 < sampling.top_k < logits.shape[-1]:
            cutoff = torch.topk(logits, sampling.top_k).values[-1]
            logits = logits.masked_fill(logits < cutoff, float("-inf"))
        probs = torch.softmax(logits, dim=-1)
        if sampling.top_p < 1.0:
            sorted_probs, order = torch.sort(probs, descending=True)
            # keep the smallest prefix whose mass reaches top_p (the first token always stays)
            drop = (torch.cumsum(sorted_probs, dim=-1) - sorted_probs) >= sampling.top_p
            sorted_probs = sorted_probs.masked_fill(drop, 0.0)
            probs = torch.zeros_like(probs).scatter(0, order, sorted_probs)
            probs = probs / probs.sum()
        token_id = int(torch.multinomial(probs, 1, generator=generator))
        return token_id, float(torch.log(probs[token_id]))


def _same_shape(a: Any, b: Any) -> bool:
    mine = {k: tuple(v.shape) for k, v in a.state_dict().items()}
    return mine == {k: tuple(v.shape) for k, v in b.state_dict().items()}
