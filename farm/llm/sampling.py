"""What a policy is asked to do (SamplingRequest), what it returns (Sample), and when it must stop."""

from __future__ import annotations

from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

from farm.chat.tokenizer import ChatTokenizer


class SamplingRequest(BaseModel):
    """Normalized sampling parameters, whatever wire format (vLLM, OpenAI chat, SGLang) they came in."""

    model_config = ConfigDict(extra="ignore")

    max_tokens: int = Field(ge=1)
    temperature: float = Field(1.0, ge=0.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    top_k: int = -1
    """-1 or 0: no top-k cut."""
    seed: int | None = None
    stop: list[str] = Field(default_factory=list)
    stop_token_ids: list[int] = Field(default_factory=list)
    include_stop_str_in_output: bool = False
    ignore_eos: bool = False


@dataclass
class Sample:
    token_ids: list[int] = field(default_factory=list)
    logprobs: list[float] = field(default_factory=list)
    finish_reason: str = "length"
    """stop (end-of-turn token, stop token or stop string) or length; abort or repetition when a finish
    fault (ServerConfig.finish_faults) ends the request instead."""
    stop_reason: str | int | None = None
    """The matched stop string or stop token id; None for end-of-turn or length."""
    text: str = ""
    """The decoded output with special tokens, cut before a matched stop string unless asked otherwise."""
    weight_version: str | None = None
    """The weights that produced every token of this sample (policies with weights: tiny)."""


class StopChecker:
    """Feeds sampled tokens one by one and says when generation ends, as vLLM does: the end-of-turn token
    and any matched stop string stay in `token_ids`; the text leaves out a stop token and is trimmed at a
    stop string."""

    def __init__(self, tokenizer: ChatTokenizer, sampling: SamplingRequest) -> None:
        self.tokenizer = tokenizer
        self.sampling = sampling
        self.sample = Sample()
        self._other_ends = tokenizer.turn_end_ids() - {tokenizer.eos_token_id}

    def feed(self, token_id: int, logprob: float) -> bool:
        """Record one token; True when generation is over (then `self.sample` is final)."""
        sample, sampling = self.sample, self.sampling
        sample.token_ids.append(token_id)
        sample.logprobs.append(logprob)
        if not sampling.ignore_eos and token_id == self.tokenizer.eos_token_id:
            return self._finish("stop", None)
        if not sampling.ignore_eos and token_id in self._other_ends:
            # the model's other eos ids (Llama's <|eom_id|>, GLM's <|user|> / <|observation|>): vLLM
            # adds its generation_config's eos ids to stop_token_ids, so the stop reason is the id
            return self._finish("stop", token_id)
        if token_id in sampling.stop_token_ids:
            return self._finish("stop", token_id)
        if sampling.stop:
            text = self.tokenizer.decode(sample.token_ids)
            hits = [(text.find(s), s) for s in sampling.stop if s and s in text]
            if hits:
                at, stop = min(hits)
                sample.text = text[: at + len(stop)] if sampling.include_stop_str_in_output else text[:at]
                sample.finish_reason, sample.stop_reason = "stop", stop
                return True
        if len(sample.token_ids) >= sampling.max_tokens:
            return self._finish("length", None)
        return False

    def _finish(self, reason: str, stop_reason: int | None) -> bool:
        """A stop on a token (eos, a generation-config end id, a stop token id) keeps the token in
        `token_ids` but leaves its text out, as vLLM's detokenizer does (vllm/v1/engine/detokenizer.py
        `update(..., stop_terminated)`), unless `include_stop_str_in_output`."""
        sample = self.sample
        sample.finish_reason, sample.stop_reason = reason, stop_reason
        keep = reason != "stop" or self.sampling.include_stop_str_in_output
        sample.text = self.tokenizer.decode(sample.token_ids if keep else sample.token_ids[:-1])
        return True

    def finish_unterminated(self) -> Sample:
        """The policy ran out of tokens without a stop: report it as a length finish."""
        if not self.sample.text:
            self.sample.text = self.tokenizer.decode(self.sample.token_ids)
        return self.sample
