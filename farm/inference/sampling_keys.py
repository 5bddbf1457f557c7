"""Which sampling parameters each inference server accepts, and under which name.

The farm's vocabulary is vLLM's (OpenAI's completions names). A key no server knows is refused when
the job is submitted (422 naming `sampling_params.<key>`); a key the chosen backend's kind does not
know is refused at the call, as a classified rejection, never sent (SGLang answers 400 to unknown
keys; vLLM would ignore them with only a server-side warning, so a typo would silently not apply).

Read from the servers' own request models:
- vLLM `CompletionRequest`: vllm-project/vllm, vllm/entrypoints/openai/completion/protocol.py
  @ d5dba2d7b0ab9b98096560c69db7126b54b14d79 (the sampling and extra parameters a caller sets).
- SGLang `SamplingParams`: sgl-project/sglang, python/sglang/srt/sampling/sampling_params.py
  @ 00c17cafcb9e289d5ca97c50e44ada54e4fd5b03 (its "API parameters"; msgspec refuses any other).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Literal

BackendKind = Literal["vllm", "sglang"]

SET_BY_FARM = frozenset(
    {
        "model", "prompt", "n", "stream", "stream_options", "logprobs", "echo", "suffix", "user",
        "return_token_ids", "return_tokens_as_token_ids", "add_special_tokens", "prompt_logprobs",
        "request_id", "prompt_embeds", "input_ids", "return_logprob", "logprob_start_len",
        "top_logprobs_num", "use_beam_search",
    }
)  # fmt: skip
"""Set by the farm on every call as token-in/token-out needs them (one sample, sampled ids and their
logprobs, no special tokens added): a caller may not change them."""

VLLM_KEYS = frozenset(
    {
        "temperature", "top_p", "top_k", "min_p", "max_tokens", "min_tokens", "seed", "stop",
        "stop_token_ids", "include_stop_str_in_output", "ignore_eos", "frequency_penalty",
        "presence_penalty", "repetition_penalty", "length_penalty", "logit_bias", "allowed_token_ids",
        "bad_words", "skip_special_tokens", "spaces_between_special_tokens", "truncate_prompt_tokens",
        "truncation_side", "response_format", "structured_outputs", "priority", "cache_salt",
        "vllm_xargs", "repetition_detection", "thinking_token_budget", "logprob_token_ids",
        "kv_transfer_params",
    }
)  # fmt: skip

SGLANG_NAMES: dict[str, str] = {
    # farm (vLLM) name -> SGLang name, for the keys SGLang has under another name
    "max_tokens": "max_new_tokens",
    "min_tokens": "min_new_tokens",
    "seed": "sampling_seed",
}
SGLANG_KEYS = frozenset(
    {
        "max_new_tokens", "min_new_tokens", "sampling_seed", "stop", "stop_token_ids", "stop_regex",
        "temperature", "top_p", "top_k", "min_p", "frequency_penalty", "presence_penalty",
        "repetition_penalty", "json_schema", "regex", "ebnf", "structural_tag", "ignore_eos",
        "skip_special_tokens", "spaces_between_special_tokens", "no_stop_trim", "custom_params",
        "logit_bias",
    }
)  # fmt: skip
"""SGLang's own names; a caller may use them directly for its SGLang-only keys (`regex`, ...)."""

_SGLANG_FROM_FARM = {**{k: k for k in SGLANG_KEYS}, **SGLANG_NAMES}
_ACCEPTED = VLLM_KEYS | set(_SGLANG_FROM_FARM)


class UnsupportedSamplingKey(ValueError):
    def __init__(self, key: str, reason: str) -> None:
        super().__init__(f"sampling_params.{key}: {reason}")
        self.key = key


def check_known(keys: Iterable[str]) -> None:
    """Raises for the first key no inference server accepts or the farm sets itself."""
    for key in keys:
        if key in SET_BY_FARM:
            raise UnsupportedSamplingKey(key, "set by the farm on every call; it cannot be changed")
        if key not in _ACCEPTED:
            raise UnsupportedSamplingKey(key, "not a sampling parameter of vLLM or SGLang")


def for_backend(kind: BackendKind, sampling: Mapping[str, Any]) -> dict[str, Any]:
    """The caller's sampling parameters as `kind` names them (None values dropped); raises
    UnsupportedSamplingKey for a key that kind does not accept."""
    out: dict[str, Any] = {}
    for key, value in sampling.items():
        if value is None:
            continue
        if key in SET_BY_FARM:
            raise UnsupportedSamplingKey(key, "set by the farm on every call; it cannot be changed")
        if kind == "vllm":
            if key not in VLLM_KEYS:
                raise UnsupportedSamplingKey(key, "not accepted by vLLM backends")
            out[key] = value
        else:
            if key not in _SGLANG_FROM_FARM:
                raise UnsupportedSamplingKey(key, "not accepted by SGLang backends")
            out[_SGLANG_FROM_FARM[key]] = value
    return out
