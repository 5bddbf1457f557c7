"""/v1/chat/completions answers as vLLM or SGLang shapes them (pure builders plus the SSE stream).

vLLM (vllm/entrypoints/openai/chat_completion/protocol.py): `prompt_token_ids` at the top level and
`token_ids` per choice when `return_token_ids` is set; `stop_reason`; `message.reasoning`; logprob
tokens may be `token_id:N`; streaming carries `prompt_token_ids` in the first chunk and `token_ids`
in every chunk.

SGLang (sgl-project/sglang, python/sglang/srt/entrypoints/openai/protocol.py @
004c82e07d876f6e4a0ad6e15325706b0f478f1a, ChatCompletionResponseChoice; serving_chat.py
`_build_chat_response`): `prompt_token_ids` (with `return_prompt_token_ids` or `return_token_ids`),
`token_ids` (with `return_token_ids`) and `meta_info` (with `return_meta_info`) sit on each choice and
are refused with `stream=true`; `matched_stop`; `message.reasoning_content`; `content` is "" rather
than null; logprob tokens are text. Response-level `sglext.input_ids` / `sglext.output_ids` (asked
with `return_input_ids_in_sglext` / `return_output_ids_in_sglext`) also arrive in streams, as one
chunk with empty choices after the last token.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator
from typing import Any

from farm.chat.families import family_named
from farm.llm import formats
from farm.llm.engine import Engine
from farm.llm.protocol import ChatCompletionRequest
from farm.llm.sampling import Sample, SamplingRequest

_SGLANG_STREAM_REFUSALS = {
    "return_prompt_token_ids": "return_prompt_token_ids is not supported with streaming. Please set "
    "stream=false when using return_prompt_token_ids=true.",
    "return_token_ids": "return_token_ids is not supported with streaming on /v1/chat/completions. Please "
    "set stream=false when using return_token_ids=true.",
    "return_meta_info": "return_meta_info is not supported with streaming. Please set stream=false when "
    "using return_meta_info=true.",
}


def refuse_sglang_stream_flags(body: ChatCompletionRequest) -> None:
    """SGLang's serving_chat `_convert_to_internal_request` refuses these flags on a stream."""
    for flag, message in _SGLANG_STREAM_REFUSALS.items():
        if getattr(body, flag):
            raise ValueError(message)


def chat_response(
    engine: Engine,
    body: ChatCompletionRequest,
    prompt_ids: list[int],
    samples: list[Sample],
    parse_tools: bool,
) -> dict[str, Any]:
    sglang = engine.config.emulate == "sglang"
    build = _sglang_choice if sglang else _vllm_choice
    choices = [build(engine, body, prompt_ids, j, s, parse_tools) for j, s in enumerate(samples)]
    answer: dict[str, Any] = {
        "id": formats.new_id("chatcmpl"),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": engine.model_name,
        "choices": choices,
        "usage": formats.usage(len(prompt_ids), sum(len(s.token_ids) for s in samples)),
    }
    if sglang:
        # SGLang's chat reply names the weights that served it (test/srt/test_weight_version.py).
        answer["metadata"] = {
            "weight_version": samples[0].weight_version if samples else engine.weight_version
        }
        sglext = _sglext(body, prompt_ids, [s.token_ids for s in samples])
        if sglext:
            answer["sglext"] = sglext
    elif body.return_token_ids:
        answer["prompt_token_ids"] = prompt_ids
    return answer


def _vllm_choice(
    engine: Engine,
    body: ChatCompletionRequest,
    prompt_ids: list[int],
    index: int,
    sample: Sample,
    tools: bool,
) -> dict[str, Any]:
    tokenizer = engine.tokenizer
    message, finish = formats.assistant_message(tokenizer, sample, tools)
    if engine.config.emulate == "vllm" and not message["tool_calls"]:
        del message["tool_calls"]  # vLLM 0.32 leaves the key out of an answer without tool calls
    choice: dict[str, Any] = {
        "index": index,
        "message": message,
        "logprobs": None,
        "finish_reason": finish,
        "stop_reason": sample.stop_reason,
    }
    if body.logprobs:
        as_ids = body.return_tokens_as_token_ids
        choice["logprobs"] = formats.chat_logprobs(
            tokenizer, sample.token_ids, sample.logprobs, as_ids, body.top_logprobs
        )
    if body.return_token_ids:
        choice["token_ids"] = sample.token_ids
    return choice


def _sglang_choice(
    engine: Engine,
    body: ChatCompletionRequest,
    prompt_ids: list[int],
    index: int,
    sample: Sample,
    tools: bool,
) -> dict[str, Any]:
    tokenizer = engine.tokenizer
    message, finish = sglang_message(engine, sample, tools)
    matched = formats.sglang_finish(sample).get("matched")
    choice: dict[str, Any] = {
        "index": index,
        "message": message,
        "logprobs": None,
        "finish_reason": finish,
        "matched_stop": None if finish == "tool_calls" else matched,
    }
    if body.logprobs:
        choice["logprobs"] = formats.chat_logprobs(
            tokenizer, sample.token_ids, sample.logprobs, False, body.top_logprobs
        )
    if body.return_prompt_token_ids or body.return_token_ids:
        choice["prompt_token_ids"] = prompt_ids
    if body.return_token_ids:
        choice["token_ids"] = sample.token_ids
    if body.return_meta_info:
        meta = formats.sglang_meta(tokenizer, prompt_ids, sample, return_logprob=body.logprobs, latency_s=0.0)
        if finish == "tool_calls":
            # serving_chat's _process_tool_calls rewrites the engine's finish_reason dict in place.
            meta["finish_reason"] = {"type": "tool_calls", "matched": None}
        choice["meta_info"] = meta
    return choice


def sglang_message(engine: Engine, sample: Sample, parse_tools: bool) -> tuple[dict[str, Any], str]:
    """The vLLM message renamed as SGLang's ChatMessage has it."""
    message, finish = formats.assistant_message(engine.tokenizer, sample, parse_tools)
    calls = [
        {**call, "id": f"call_{uuid.uuid4().hex[:24]}", "index": i}
        for i, call in enumerate(message["tool_calls"])
    ]
    shaped = {
        "role": "assistant",
        "content": message["content"] or "",
        "reasoning_content": message["reasoning"],
        "tool_calls": calls or None,
    }
    return shaped, finish


def _sglext(body: ChatCompletionRequest, prompt_ids: list[int], outputs: list[list[int]]) -> dict[str, Any]:
    sglext: dict[str, Any] = {}
    if body.return_input_ids_in_sglext:
        sglext["input_ids"] = prompt_ids
    if body.return_output_ids_in_sglext:
        sglext["output_ids"] = outputs
    return sglext


async def chat_stream(
    engine: Engine,
    body: ChatCompletionRequest,
    prompt_ids: list[int],
    sampling: SamplingRequest,
    parse_tools: bool,
) -> AsyncIterator[str]:
    """SSE: role chunk, one chunk per token, finish chunk, [sglext], usage, [DONE]. Text from the token
    that opens the family's tool calls (`<tool_call>`, `[TOOL_CALLS]`, ...) is held back and sent as parsed
    tool calls in the finish chunk."""
    chunks = _Chunks(engine)
    sglang = engine.config.emulate == "sglang"
    first: dict[str, Any] = {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
    yield chunks(first, **({"prompt_token_ids": prompt_ids} if body.return_token_ids and not sglang else {}))
    sent = 0
    sample = Sample()
    hold_from = family_named(engine.tokenizer.family).call_marker if parse_tools else None
    async for released, sample in engine.stream(prompt_ids, sampling):
        choice, sent = _token_chunk(engine, body, sample, released, sent, hold_from)
        yield chunks(choice)
    yield chunks(_finish_chunk(engine, sample, sent, parse_tools))
    sglext = _sglext(body, prompt_ids, [sample.token_ids]) if sglang else {}
    if sglext:
        yield chunks({}, sglext=sglext)
    if body.stream_options and body.stream_options.include_usage:
        yield chunks({}, usage=formats.usage(len(prompt_ids), len(sample.token_ids)))
    yield "data: [DONE]\n\n"


class _Chunks:
    def __init__(self, engine: Engine) -> None:
        self.model = engine.model_name
        self.id, self.created = formats.new_id("chatcmpl"), int(time.time())

    def __call__(self, choice: dict[str, Any], **extra: Any) -> str:
        payload = {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [choice] if choice else [],
            **extra,
        }
        return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n"


def _token_chunk(
    engine: Engine,
    body: ChatCompletionRequest,
    sample: Sample,
    released: int,
    sent: int,
    hold_from: str | None,
) -> tuple[dict[str, Any], int]:
    tokenizer = engine.tokenizer
    sglang = engine.config.emulate == "sglang"
    ids = sample.token_ids[:released]
    shown = formats.visible_text(tokenizer, tokenizer.decode(ids), True)
    if hold_from and hold_from in shown:
        shown = shown[: shown.index(hold_from)].rstrip("\n")
    delta_text = "" if shown.endswith("\ufffd") else shown[sent:]
    choice: dict[str, Any] = {"index": 0, "delta": {"content": delta_text} if delta_text else {}}
    choice["finish_reason"] = None
    if body.logprobs:
        values = sample.logprobs[released - 1 : released]
        as_ids = body.return_tokens_as_token_ids and not sglang
        choice["logprobs"] = formats.chat_logprobs(tokenizer, ids[-1:], values, as_ids, body.top_logprobs)
    if body.return_token_ids and not sglang:
        choice["token_ids"] = ids[-1:]
    return choice, sent + len(delta_text)


def _finish_chunk(engine: Engine, sample: Sample, sent: int, parse_tools: bool) -> dict[str, Any]:
    sglang = engine.config.emulate == "sglang"
    if sglang:
        message, finish = sglang_message(engine, sample, parse_tools)
    else:
        message, finish = formats.assistant_message(engine.tokenizer, sample, parse_tools)
    delta: dict[str, Any] = {}
    if message["tool_calls"]:
        delta["tool_calls"] = [{**call, "index": i} for i, call in enumerate(message["tool_calls"])]
    else:
        rest = (message["content"] or "")[sent:]
        if rest:
            delta["content"] = rest
    choice: dict[str, Any] = {"index": 0, "delta": delta, "finish_reason": finish}
    if sglang:
        choice["matched_stop"] = (
            None if finish == "tool_calls" else formats.sglang_finish(sample).get("matched")
        )
    else:
        choice["stop_reason"] = sample.stop_reason
    return choice
