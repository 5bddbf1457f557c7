"""Settings of one reference LLM server process (the flags of `farm llm serve`)."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field, model_validator

Emulated = Literal["vllm", "sglang"]
FinishFault = Literal["abort", "repetition"]


class ServerConfig(BaseModel):
    policy: Literal["scripted", "tiny"] = "scripted"
    seed: int = 0
    """Seeds the model weights (tiny) and the server RNG used by requests without a seed."""
    accuracy: float = Field(0.5, ge=0.0, le=1.0)
    """scripted: chance that an episode follows its success path."""
    token_latency_ms: float = Field(0.0, ge=0.0)
    """Simulated time per sampled token, so benches can model an LLM-bound run stage."""
    prefill_latency_ms: float = Field(0.0, ge=0.0)
    """Simulated time per request before the first token."""
    latency_sigma: float = Field(0.0, ge=0.0, le=4.0)
    """Long tail: each request's simulated latency is scaled by a log-normal factor with this sigma and
    mean 1 (so throughput is unchanged on average, only the spread grows). Drawn from the request's
    seed, so a rerun with the same seeds sees the same stragglers. 0 = every request alike."""
    max_model_len: int = Field(131072, ge=16)
    """Real harnesses send 8k-28k tokens of system prompt and tool schemas in their first request."""
    scripts: list[str] = Field(default_factory=list)
    """Extra script files (JSONL) for the scripted policy."""
    handler_scripts: bool = True
    """Also load every handlers/*/scripts/*.jsonl from the installed handlers package."""
    tokenizer: str | None = None
    """A local tokenizer directory, `pkg:<module>` or `mistral:<name>`; None means the shipped farm-tiny."""
    served_model_name: str | None = None
    """Name reported by /v1/models and in answers; defaults to the tokenizer's name."""
    emulate: Emulated = "vllm"
    """Which real server to behave like: its request validation (context window, unknown keys), its
    error bodies and its reply shapes on the OpenAI routes. /generate is SGLang's in both modes."""
    over_window: Literal["refuse", "clamp"] = "refuse"
    """vLLM only: a request whose prompt plus max_tokens exceed the window. `refuse` answers 400 as vLLM
    releases before the 0.2x series did, and is the default so the farm's overflow handling stays exercised;
    `clamp` answers as vLLM 0.32 does (measured, vllm/entrypoints/serve/utils/api_utils.py get_max_tokens):
    max_tokens becomes what is left of the window, and only a prompt that fills the window is refused."""
    finish_faults: dict[FinishFault, float] = Field(default_factory=dict)
    """Chance per request that generation ends with this finish reason instead of its own: `abort`
    (the engine dropped the request; part of the output is lost) or `repetition` (vLLM's repetition
    detection; SGLang has none). Drawn from the request's seed, so a rerun sees the same faults."""

    @model_validator(mode="after")
    def _faults_fit(self) -> ServerConfig:
        if any(not 0.0 <= p <= 1.0 for p in self.finish_faults.values()):
            raise ValueError("finish_faults: each chance must be within [0, 1]")
        if sum(self.finish_faults.values()) > 1.0:
            raise ValueError("finish_faults: the chances add up to more than 1")
        if self.emulate == "sglang" and "repetition" in self.finish_faults:
            raise ValueError("finish_faults: SGLang has no `repetition` finish reason")
        return self
