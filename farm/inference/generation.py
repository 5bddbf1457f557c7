"""The result of one token-in/token-out call."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, model_validator

FinishReason = Literal["stop", "length", "abort"]


class Generation(BaseModel):
    token_ids: list[int]
    """Every sampled id, including the end-of-turn token or matched stop string."""
    logprobs: list[float]
    """Logprob of each sampled id, as the backend reported it."""
    finish_reason: FinishReason
    text: str = ""
    prompt_tokens: int = 0
    backend: str = ""
    latency_s: float = Field(0.0, ge=0.0)
    stop_reason: str | int | None = None
    """The stop string or stop token id that ended generation, when the backend says (None for EOS)."""
    weight_version: str | None = None
    """The weights that produced it, when the backend says (SGLang's meta_info.weight_version)."""

    @model_validator(mode="after")
    def _aligned(self) -> Generation:
        if len(self.token_ids) != len(self.logprobs):
            raise ValueError(f"{len(self.token_ids)} token ids but {len(self.logprobs)} logprobs")
        return self
