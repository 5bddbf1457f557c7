"""How each real server bounds a request by its context window, and how it words the refusal.

vLLM (vllm-project/vllm, vllm/entrypoints/openai/serving_engine.py `_validate_input`, as of
9cfa5486 and the wording of later releases seen in the field): a prompt that alone fills the window
is refused; `max_tokens` beyond what is left is refused (`prompt + max_tokens > window`); an unset
`max_tokens` becomes "whatever is left". Errors answer 400 as {"error": {message, type, param, code}}.

SGLang (sgl-project/sglang, python/sglang/srt/managers/tokenizer_manager.py `_validate_one_request`
and scheduler.py `init_req_max_new_tokens`): the prompt must be shorter than the window; a set
`max_new_tokens` must keep `prompt + max_new_tokens` *below* the window (`>=` is refused, one token
stricter than vLLM); an unset one is clamped to `max_req_len - prompt - 1` with
`max_req_len = context_len - 1`. The OpenAI routes answer 400 as a top-level ErrorResponse
{object: "error", message, type, param, code} (entrypoints/openai/protocol.py @ 004c82e07d87);
/generate answers {"error": {"message"}} (entrypoints/http_server.py).
"""

from __future__ import annotations

from typing import Any

from farm.llm.config import Emulated

VLLM_VERSION = "0.32.0"
"""The vLLM release whose answers the emulation was last compared with (tests/real_server, the conformance
fixture tests/model_side/vllm_conformance.json)."""


class ContextWindowExceeded(ValueError):
    """Prompt plus max_tokens do not fit; the message is the emulated server's own."""

    def __init__(self, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


def resolve_max_tokens(
    emulate: Emulated, limit: int, prompt_len: int, max_tokens: int | None, *, clamp: bool = False
) -> int:
    """The output budget the emulated server would grant, or ContextWindowExceeded as it refuses. `clamp`:
    vLLM 0.32's rule (ServerConfig.over_window)."""
    if prompt_len == 0:
        raise ValueError("the prompt is empty")
    if emulate == "sglang":
        return _sglang_budget(limit, prompt_len, max_tokens)
    if clamp:
        return _vllm_clamped_budget(limit, prompt_len, max_tokens)
    return _vllm_budget(limit, prompt_len, max_tokens)


def _vllm_clamped_budget(limit: int, prompt_len: int, max_tokens: int | None) -> int:
    """vLLM 0.32 (vllm/renderers/params.py `_token_len_check`, entrypoints/serve/utils/api_utils.py
    `get_max_tokens`): a prompt longer than the window is refused; max_tokens is cut to what is left."""
    if prompt_len >= limit:
        raise ContextWindowExceeded(
            f"This model's maximum context length is {limit} tokens. However, your prompt contains "
            f"{prompt_len} input tokens, which exceeds this limit even without any output tokens. Please "
            "reduce the length of the input prompt.",
            param="input_tokens",
        )
    left = limit - prompt_len
    return left if max_tokens is None else min(max_tokens, left)


def _vllm_budget(limit: int, prompt_len: int, max_tokens: int | None) -> int:
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
            f"({max_tokens} > {limit} - {prompt_len}). (parameter=max_tokens, value={max_tokens})",
            param="max_tokens",
        )
    return max_tokens


def _sglang_budget(limit: int, prompt_len: int, max_tokens: int | None) -> int:
    if prompt_len >= limit:
        raise ContextWindowExceeded(
            f"The input ({prompt_len} tokens) is longer than the model's context length ({limit} tokens)."
        )
    if max_tokens is not None and prompt_len + max_tokens >= limit:
        raise ContextWindowExceeded(
            f"Requested token count exceeds the model's maximum context length of {limit} tokens. "
            f"You requested a total of {prompt_len + max_tokens} tokens: {prompt_len} tokens from the "
            f"input messages and {max_tokens} tokens for the completion. Please reduce the number of "
            "tokens in the input messages or the completion to fit within the limit."
        )
    clamped = (limit - 1) - prompt_len - 1
    budget = clamped if max_tokens is None else min(max_tokens, clamped)
    if budget < 1:
        # The window has room for the prompt but none for one output token.
        raise ContextWindowExceeded(
            f"The input ({prompt_len} tokens) is longer than the model's context length ({limit} tokens)."
        )
    return budget


def openai_error(emulate: Emulated, message: str, param: str | None = None) -> dict[str, Any]:
    """The 400 body of the emulated server's OpenAI routes."""
    if emulate == "sglang":
        return {"object": "error", "message": message, "type": "BadRequestError", "param": param, "code": 400}
    return {"error": {"message": message, "type": "BadRequestError", "param": param, "code": 400}}


def generate_error(message: str) -> dict[str, Any]:
    """SGLang's /generate 400 body."""
    return {"error": {"message": message}}


SGLANG_SAMPLING_PARAMS = frozenset(
    {
        "max_new_tokens", "stop", "stop_token_ids", "stop_regex", "temperature", "top_p", "top_k",
        "min_p", "frequency_penalty", "presence_penalty", "repetition_penalty", "min_new_tokens", "n",
        "json_schema", "regex", "ebnf", "structural_tag", "ignore_eos", "skip_special_tokens",
        "spaces_between_special_tokens", "no_stop_trim", "custom_params", "stream_interval",
        "logit_bias", "sampling_seed",
    }
)  # fmt: skip
"""The API parameters of SGLang's SamplingParams (sgl-project/sglang,
python/sglang/srt/sampling/sampling_params.py @ 00c17cafcb9e289d5ca97c50e44ada54e4fd5b03), a
`msgspec.Struct(kw_only=True)`: constructing it with any other keyword is a TypeError."""
