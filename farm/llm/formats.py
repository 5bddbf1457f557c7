"""Answer bodies shaped like vLLM's OpenAI-compatible server and SGLang's /generate (pure functions)."""

from __future__ import annotations

import time
import uuid
from typing import Any

from farm.chat.tokenizer import ChatTokenizer
from farm.chat.tool_calls import ParsedAssistant
from farm.llm.sampling import Sample


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex}"


def vllm_error(message: str, status: int = 400, kind: str = "BadRequestError") -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "param": None, "code": status}}


def visible_text(tokenizer: ChatTokenizer, text: str, skip_special_tokens: bool) -> str:
    if not skip_special_tokens:
        return text
    for token in tokenizer.hf.all_special_tokens:
        text = text.replace(token, "")
    return text


def token_label(tokenizer: ChatTokenizer, token_id: int, as_ids: bool) -> str:
    return f"token_id:{token_id}" if as_ids else tokenizer.token_text(token_id)


def usage(prompt_tokens: int, completion_tokens: int) -> dict[str, int]:
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion_tokens,
        "total_tokens": prompt_tokens + completion_tokens,
    }


def completion_choice(
    tokenizer: ChatTokenizer,
    index: int,
    prompt_ids: list[int],
    sample: Sample,
    *,
    logprobs: int | None,
    return_token_ids: bool,
    as_ids: bool,
    skip_special_tokens: bool,
) -> dict[str, Any]:
    choice: dict[str, Any] = {
        "index": index,
        "text": visible_text(tokenizer, sample.text, skip_special_tokens),
        "logprobs": None,
        "finish_reason": sample.finish_reason,
        "stop_reason": sample.stop_reason,
        "prompt_logprobs": None,
    }
    if logprobs is not None:
        labels = [token_label(tokenizer, t, as_ids) for t in sample.token_ids]
        offsets, at = [], 0
        for t in sample.token_ids:
            offsets.append(at)
            at += len(tokenizer.token_text(t))
        choice["logprobs"] = {
            "text_offset": offsets,
            "token_logprobs": sample.logprobs,
            "tokens": labels,
            "top_logprobs": [{label: lp} for label, lp in zip(labels, sample.logprobs, strict=True)],
        }
    if return_token_ids:
        choice["prompt_token_ids"] = prompt_ids
        choice["token_ids"] = sample.token_ids
    return choice


def completion_response(
    model: str, choices: list[dict[str, Any]], prompt_tokens: int, completion_tokens: int
) -> dict[str, Any]:
    return {
        "id": new_id("cmpl"),
        "object": "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": choices,
        "usage": usage(prompt_tokens, completion_tokens),
    }


def assistant_message(
    tokenizer: ChatTokenizer, sample: Sample, parse_tools: bool
) -> tuple[dict[str, Any], str]:
    """The chat `message` and its finish_reason; tool calls are parsed as vLLM's hermes parser does."""
    parsed: ParsedAssistant = tokenizer.parse_assistant(sample.text)
    raw = visible_text(tokenizer, sample.text, True)
    message: dict[str, Any] = {"role": "assistant", "content": raw, "reasoning": None, "tool_calls": []}
    if parsed.reasoning is not None:
        message["reasoning"] = parsed.reasoning
        message["content"] = parsed.content
    finish = sample.finish_reason
    if parse_tools and parsed.tool_calls and not parsed.errors:
        message["content"] = parsed.content or None
        message["tool_calls"] = [
            {**call.to_openai(), "id": new_id("chatcmpl-tool")} for call in parsed.tool_calls
        ]
        if finish == "stop":
            finish = "tool_calls"
    return message, finish


def chat_logprobs(
    tokenizer: ChatTokenizer, ids: list[int], values: list[float], as_ids: bool, top: int | None
) -> dict[str, Any]:
    content = []
    for token_id, value in zip(ids, values, strict=True):
        label = token_label(tokenizer, token_id, as_ids)
        raw = list(tokenizer.token_text(token_id).encode("utf-8"))
        entry: dict[str, Any] = {"token": label, "logprob": value, "bytes": raw, "top_logprobs": []}
        if top:
            entry["top_logprobs"] = [{"token": label, "logprob": value, "bytes": raw}]
        content.append(entry)
    return {"content": content}


def sglang_finish(sample: Sample) -> dict[str, Any]:
    """meta_info.finish_reason as SGLang's scheduler reports it: the `to_json` of FINISH_MATCHED_TOKEN,
    FINISH_MATCHED_STR, FINISH_LENGTH and FINISH_ABORT (sgl-project/sglang,
    python/sglang/srt/managers/schedule_batch.py @ fd3907ee4618e96b73ee94d9a836db78efb5d046)."""
    if sample.finish_reason == "abort":
        return {"type": "abort", "message": "Aborted", "status_code": None, "err_type": None}
    if sample.finish_reason == "length":
        return {"type": "length", "length": len(sample.token_ids)}
    matched = sample.stop_reason if sample.stop_reason is not None else sample.token_ids[-1]
    return {"type": "stop", "matched": matched}


def sglang_meta(
    tokenizer: ChatTokenizer, prompt_ids: list[int], sample: Sample, *, return_logprob: bool, latency_s: float
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "id": new_id("sgl").removeprefix("sgl-"),
        "finish_reason": sglang_finish(sample),
        "prompt_tokens": len(prompt_ids),
        "completion_tokens": len(sample.token_ids),
        "cached_tokens": 0,
        "weight_version": "default",
        "e2e_latency": latency_s,
    }
    if return_logprob:
        meta["output_token_logprobs"] = [
            [lp, t, tokenizer.token_text(t)] for t, lp in zip(sample.token_ids, sample.logprobs, strict=True)
        ]
        meta["input_token_logprobs"] = []
    return meta


def sglang_response(
    tokenizer: ChatTokenizer,
    prompt_ids: list[int],
    sample: Sample,
    *,
    return_logprob: bool,
    skip_special_tokens: bool,
    no_stop_trim: bool,
    latency_s: float,
) -> dict[str, Any]:
    text = sample.text
    if no_stop_trim and isinstance(sample.stop_reason, str) and not text.endswith(sample.stop_reason):
        text += sample.stop_reason
    meta = sglang_meta(tokenizer, prompt_ids, sample, return_logprob=return_logprob, latency_s=latency_s)
    if return_logprob:
        # /generate sets return_text_in_logprobs=False unless asked: the text slot is null there.
        meta["output_token_logprobs"] = [[lp, t, None] for lp, t, _ in meta["output_token_logprobs"]]
    return {
        "text": visible_text(tokenizer, text, skip_special_tokens),
        "output_ids": sample.token_ids,
        "meta_info": meta,
    }
