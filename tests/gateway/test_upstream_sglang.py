"""The gateway reads token ids and logprobs from SGLang's real OpenAI chat replies as well as vLLM's.

The replies below are written from reading the servers' code, not captured from the farm's server:
- SGLang: sgl-project/sglang python/sglang/srt/entrypoints/openai/protocol.py @
  004c82e07d876f6e4a0ad6e15325706b0f478f1a (ChatCompletionResponseChoice: prompt_token_ids, token_ids,
  meta_info, matched_stop; ChatMessage.reasoning_content; ChatCompletionResponse.metadata/sglext) and
  serving_chat.py `_build_chat_response` (content "" not null; `meta_info` is the engine's, whose
  `output_token_logprobs` are [logprob, id, text]; logprob `token`s are text; finish_reason "abort").
- vLLM: vllm/entrypoints/openai/chat_completion/protocol.py (top-level prompt_token_ids, per-choice
  token_ids, stop_reason, logprob tokens `token_id:N` with return_tokens_as_token_ids).
"""

from __future__ import annotations

from typing import Any

import pytest

from farm.gateway.errors import ErrorKind, GatewayError
from farm.gateway.streaming import StreamAssembler
from farm.gateway.upstream import capture_keys, chat_url, client_error, error_message, parse_chat_reply

PROMPT = [151644, 872, 198, 3838, 374, 220, 17, 353, 220, 18, 30, 151645, 198, 151644, 77091, 198]
SAMPLED = [(785, -0.02, "The"), (4226, -0.51, " answer"), (374, -0.01, " is"), (220, -0.3, " "),
           (20, -0.05, "5"), (16, -0.2, "1"), (151645, -0.001, "<|im_end|>")]  # fmt: skip
IDS = [t for t, _, _ in SAMPLED]
LOGPROBS = [lp for _, lp, _ in SAMPLED]


def _text_logprobs() -> dict[str, Any]:
    """SGLang's ChoiceLogprobs: token text, its UTF-8 bytes, no `token_id:` form."""
    content = [
        {"token": text, "bytes": list(text.encode()), "logprob": lp, "top_logprobs": []}
        for _, lp, text in SAMPLED
    ]
    return {"content": content}


def _meta_info() -> dict[str, Any]:
    return {
        "id": "5b0b1f2e",
        "finish_reason": {"type": "stop", "matched": 151645},
        "prompt_tokens": len(PROMPT),
        "completion_tokens": len(IDS),
        "cached_tokens": 0,
        "weight_version": "default",
        "output_token_logprobs": [[lp, t, text] for t, lp, text in SAMPLED],
    }


def sglang_reply(*, token_ids: bool = True, meta_info: bool = False, logprobs: bool = True) -> dict[str, Any]:
    choice: dict[str, Any] = {
        "index": 0,
        "message": {
            "role": "assistant",
            "content": "The answer is 51",
            "reasoning_content": None,
            "tool_calls": None,
        },
        "logprobs": _text_logprobs() if logprobs else None,
        "finish_reason": "stop",
        "matched_stop": 151645,
        "prompt_token_ids": PROMPT,
    }
    if token_ids:
        choice["token_ids"] = IDS
    if meta_info:
        choice["meta_info"] = _meta_info()
    return {
        "id": "5b0b1f2e",
        "object": "chat.completion",
        "created": 1764000000,
        "model": "Qwen/Qwen3-8B",
        "choices": [choice],
        "usage": {
            "prompt_tokens": len(PROMPT),
            "total_tokens": len(PROMPT) + len(IDS),
            "completion_tokens": len(IDS),
        },
        "metadata": {"weight_version": "default"},
    }


def vllm_reply() -> dict[str, Any]:
    content = [
        {"token": f"token_id:{t}", "logprob": lp, "bytes": [], "top_logprobs": []} for t, lp, _ in SAMPLED
    ]
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "Qwen/Qwen3-8B",
        "prompt_token_ids": PROMPT,
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "The answer is 51",
                    "reasoning": None,
                    "tool_calls": [],
                },
                "logprobs": {"content": content},
                "finish_reason": "stop",
                "stop_reason": None,
                "token_ids": IDS,
            }
        ],
        "usage": {"prompt_tokens": len(PROMPT), "completion_tokens": len(IDS), "total_tokens": 23},
    }


def _captured(data: dict[str, Any]) -> tuple[list[int], list[int], list[float] | None, str | None]:
    reply = parse_chat_reply(data, "c1")
    return reply.prompt_ids, reply.response_ids, reply.response_logprobs, reply.capture_problem


@pytest.mark.parametrize(
    "data",
    [
        pytest.param(sglang_reply(), id="sglang-return_token_ids"),
        pytest.param(
            sglang_reply(token_ids=False, meta_info=True, logprobs=False), id="sglang-0.5.13-meta_info"
        ),
        pytest.param(sglang_reply(meta_info=True), id="sglang-both"),
        pytest.param(vllm_reply(), id="vllm"),
    ],
)
def test_ids_and_logprobs_are_read_from_each_servers_shape(data: dict[str, Any]) -> None:
    assert _captured(data) == (PROMPT, IDS, LOGPROBS, None)
    assert parse_chat_reply(data, "c1").completion.content == "The answer is 51"


def test_sglang_sglext_ids_are_read_when_the_choice_has_none() -> None:
    data = sglang_reply(token_ids=False)
    del data["choices"][0]["prompt_token_ids"]
    data["sglext"] = {"input_ids": PROMPT, "output_ids": [IDS]}
    assert _captured(data) == (PROMPT, IDS, LOGPROBS, None)


def test_sglang_meta_info_ids_that_disagree_with_token_ids_are_not_trained_on() -> None:
    data = sglang_reply(meta_info=True, logprobs=False)
    data["choices"][0]["meta_info"]["output_token_logprobs"][2][1] = 9
    _, _, logprobs, problem = _captured(data)
    assert logprobs is None and problem == "meta_info logprob ids do not match the sampled ids"


def test_an_sglang_reply_without_ids_names_what_to_ask_for() -> None:
    data = sglang_reply(token_ids=False)
    del data["choices"][0]["prompt_token_ids"]
    problem = _captured(data)[3]
    assert problem is not None and "return_prompt_token_ids + return_meta_info" in problem


@pytest.mark.parametrize("finish", ["abort", "error"])
def test_an_aborted_call_is_an_upstream_error_not_an_answer(finish: str) -> None:
    data = sglang_reply()
    data["choices"][0]["finish_reason"] = finish
    with pytest.raises(GatewayError) as info:
        parse_chat_reply(data, "c1")
    assert info.value.kind is ErrorKind.upstream and finish in info.value.message


def test_sglang_tool_call_reply_keeps_ids_and_reports_tool_calls() -> None:
    data = sglang_reply()
    call = {"id": "call_0123456789abcdef01234567", "index": 0, "type": "function",
            "function": {"name": "python", "arguments": '{"code": "print(17 * 3)"}'}}  # fmt: skip
    data["choices"][0]["message"].update(content="", tool_calls=[call])
    data["choices"][0].update(finish_reason="tool_calls", matched_stop=None)
    reply = parse_chat_reply(data, "c1")
    assert reply.completion.finish_reason == "tool_calls" and reply.completion.tool_calls[0].name == "python"
    assert reply.response_ids == IDS


def test_sglang_overflow_error_body_is_a_context_overflow() -> None:
    """SGLang's OpenAI routes answer a top-level ErrorResponse (no "error" wrapper)."""
    body = {"object": "error", "type": "BadRequestError", "param": None, "code": 400,
            "message": "Requested token count exceeds the model's maximum context length of 1024 tokens. "
            "You requested a total of 1100 tokens: 1000 tokens from the input messages and 100 tokens "
            "for the completion. Please reduce the number of tokens in the input messages or the "
            "completion to fit within the limit."}  # fmt: skip
    error = client_error(400, error_message(body, "fallback"))
    assert error.kind is ErrorKind.context_overflow
    assert (error.max_tokens, error.prompt_tokens) == (1024, 1000)
    alone = "The input (1030 tokens) is longer than the model's context length (1024 tokens)."
    error = client_error(400, alone)
    assert error.kind is ErrorKind.context_overflow
    assert (error.max_tokens, error.prompt_tokens) == (1024, 1030)


def test_each_kind_is_asked_for_ids_in_the_way_it_accepts() -> None:
    assert capture_keys("vllm", False) == ({}, ())
    keys, dropped = capture_keys("sglang", False)
    assert keys == {"return_token_ids": True, "return_prompt_token_ids": True, "return_meta_info": True}
    keys, dropped = capture_keys("sglang", True)
    assert "return_token_ids" in dropped and keys["return_output_ids_in_sglext"] is True
    assert chat_url("http://h:30000", "sglang") == "http://h:30000/v1/chat/completions"
    assert chat_url("http://h:30000/v1/", "sglang") == "http://h:30000/v1/chat/completions"
    assert chat_url("http://h:8000/v1", "vllm") == "http://h:8000/v1/chat/completions"


def test_an_sglang_stream_gets_its_ids_from_the_sglext_chunk() -> None:
    """Chunks as serving_chat.py's stream sends them: text deltas with text logprobs, the finish chunk
    with matched_stop, then one `choices: []` chunk carrying sglext ids, then usage."""
    assembler = StreamAssembler()
    base = {"id": "x", "object": "chat.completion.chunk", "created": 1, "model": "m"}
    assembler.feed({**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]})
    for (_, _, text), entry in zip(SAMPLED[:-1], _text_logprobs()["content"], strict=False):
        choice = {
            "index": 0,
            "delta": {"content": text},
            "logprobs": {"content": [entry]},
            "finish_reason": None,
        }
        assembler.feed({**base, "choices": [choice]})
    last = {"index": 0, "delta": {}, "logprobs": {"content": [_text_logprobs()["content"][-1]]},
            "finish_reason": "stop", "matched_stop": 151645}  # fmt: skip
    assembler.feed({**base, "choices": [last]})
    assembler.feed({**base, "choices": [], "sglext": {"input_ids": PROMPT, "output_ids": [IDS]}})
    assembler.feed({**base, "choices": [], "usage": {"prompt_tokens": 16, "completion_tokens": 7}})
    reply = assembler.reply("c1")
    assert (reply.prompt_ids, reply.response_ids, reply.response_logprobs) == (PROMPT, IDS, LOGPROBS)
    assert reply.capture_problem is None and reply.completion.content == "The answer is 51"


def test_the_reply_names_the_weights_that_served_it() -> None:
    """SGLang's chat reply: top-level metadata.weight_version; its meta_info's when only that is there;
    vLLM's reply says nothing."""
    assert parse_chat_reply(sglang_reply(), "c1").weight_version == "default"
    only_meta = sglang_reply(meta_info=True)
    del only_meta["metadata"]
    only_meta["choices"][0]["meta_info"]["weight_version"] = "7"
    assert parse_chat_reply(only_meta, "c1").weight_version == "7"
    assert parse_chat_reply(vllm_reply(), "c1").weight_version is None
