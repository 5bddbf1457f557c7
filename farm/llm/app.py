"""The reference LLM server as a FastAPI app: the vLLM subset the farm speaks, plus SGLang's /generate."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse

from farm.chat.tokenizer import ChatTokenizer
from farm.llm import formats
from farm.llm.config import ServerConfig
from farm.llm.engine import Engine
from farm.llm.policies import make_policy
from farm.llm.protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    DetokenizeRequest,
    GenerateRequest,
    TokenizeRequest,
)
from farm.llm.sampling import Sample, SamplingRequest


def create_app(config: ServerConfig | None = None, **overrides: Any) -> FastAPI:
    """Build the app in-process; `overrides` set ServerConfig fields (e.g. policy="tiny")."""
    config = (config or ServerConfig()).model_copy(update=overrides)
    tokenizer = ChatTokenizer.load(config.tokenizer)
    engine = Engine(config, tokenizer, make_policy(config, tokenizer))
    app = FastAPI(title="rollout-farm reference LLM server")
    app.state.engine = engine

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError) -> JSONResponse:
        message = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        if request.url.path == "/generate":
            return JSONResponse({"error": {"message": message}}, status_code=400)
        return JSONResponse(formats.vllm_error(message), status_code=400)

    @app.get("/health")
    async def health() -> Response:
        return Response(status_code=200)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        card = {
            "id": engine.model_name,
            "object": "model",
            "created": int(time.time()),
            "owned_by": "rollout-farm",
            "root": engine.model_name,
            "max_model_len": config.max_model_len,
        }
        return {"object": "list", "data": [card]}

    @app.post("/tokenize")
    async def tokenize(body: TokenizeRequest) -> dict[str, Any]:
        if body.messages is not None:
            ids = tokenizer.apply_chat_template(body.messages, body.tools, body.add_generation_prompt)
        else:
            ids = tokenizer.encode(body.prompt or "")
        answer: dict[str, Any] = {"count": len(ids), "max_model_len": config.max_model_len, "tokens": ids}
        if body.return_token_strs:
            answer["token_strs"] = tokenizer.hf.convert_ids_to_tokens(ids)
        return answer

    @app.post("/detokenize")
    async def detokenize(body: DetokenizeRequest) -> dict[str, Any]:
        return {"prompt": tokenizer.decode(body.tokens)}

    @app.post("/v1/completions", response_model=None)
    async def completions(body: CompletionRequest) -> dict[str, Any] | JSONResponse:
        if body.stream:
            return JSONResponse(formats.vllm_error("stream is not supported on /v1/completions"), 400)
        choices: list[dict[str, Any]] = []
        prompt_total = completion_total = 0
        try:
            for p, prompt in enumerate(body.prompts()):
                prompt_ids = tokenizer.encode(prompt) if isinstance(prompt, str) else list(prompt)
                max_tokens = engine.resolve_max_tokens(len(prompt_ids), body.max_tokens)
                for j in range(body.n):
                    sampling = _sampling(body, max_tokens, j)
                    sample = await engine.generate(prompt_ids, sampling)
                    choices.append(
                        formats.completion_choice(
                            tokenizer,
                            p * body.n + j,
                            prompt_ids,
                            sample,
                            logprobs=body.logprobs,
                            return_token_ids=body.return_token_ids,
                            as_ids=body.return_tokens_as_token_ids,
                            skip_special_tokens=body.skip_special_tokens,
                        )
                    )
                    completion_total += len(sample.token_ids)
                prompt_total += len(prompt_ids)
        except ValueError as exc:
            return JSONResponse(formats.vllm_error(str(exc)), status_code=400)
        return formats.completion_response(engine.model_name, choices, prompt_total, completion_total)

    @app.post("/v1/chat/completions", response_model=None)
    async def chat_completions(body: ChatCompletionRequest) -> Any:
        try:
            prompt_ids = _chat_prompt(tokenizer, body)
            requested = body.max_completion_tokens or body.max_tokens
            max_tokens = engine.resolve_max_tokens(len(prompt_ids), requested)
        except (ValueError, TypeError) as exc:
            return JSONResponse(formats.vllm_error(str(exc)), status_code=400)
        parse_tools = body.tool_choice != "none"
        if body.stream:
            sampling = _sampling(body, max_tokens, 0)
            stream = _chat_stream(engine, body, prompt_ids, sampling, parse_tools)
            return StreamingResponse(stream, media_type="text/event-stream")
        choices = []
        completion_total = 0
        for j in range(body.n):
            sample = await engine.generate(prompt_ids, _sampling(body, max_tokens, j))
            message, finish = formats.assistant_message(tokenizer, sample, parse_tools)
            choice: dict[str, Any] = {
                "index": j,
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
            choices.append(choice)
            completion_total += len(sample.token_ids)
        answer: dict[str, Any] = {
            "id": formats.new_id("chatcmpl"),
            "object": "chat.completion",
            "created": int(time.time()),
            "model": engine.model_name,
            "choices": choices,
            "usage": formats.usage(len(prompt_ids), completion_total),
        }
        if body.return_token_ids:
            answer["prompt_token_ids"] = prompt_ids
        return answer

    @app.post("/generate", response_model=None)
    async def generate(body: GenerateRequest) -> dict[str, Any] | JSONResponse:
        params = body.sampling_params
        try:
            if body.stream:
                raise ValueError("stream is not supported on /generate")
            if body.input_ids is not None:
                prompt_ids = list(body.input_ids)
            elif body.text is not None:
                prompt_ids = tokenizer.encode(body.text)
            else:
                raise ValueError("give `text` or `input_ids`")
            max_tokens = engine.resolve_max_tokens(len(prompt_ids), int(params.get("max_new_tokens", 128)))
            sampling = _sglang_sampling(params, max_tokens)
        except (ValueError, TypeError) as exc:
            return JSONResponse({"error": {"message": str(exc)}}, status_code=400)
        started = time.perf_counter()
        sample = await engine.generate(prompt_ids, sampling)
        return formats.sglang_response(
            tokenizer,
            prompt_ids,
            sample,
            return_logprob=body.return_logprob,
            skip_special_tokens=bool(params.get("skip_special_tokens", True)),
            no_stop_trim=bool(params.get("no_stop_trim", False)),
            latency_s=time.perf_counter() - started,
        )

    return app


def _sampling(
    body: CompletionRequest | ChatCompletionRequest, max_tokens: int, index: int
) -> SamplingRequest:
    return SamplingRequest(
        max_tokens=max_tokens,
        temperature=1.0 if body.temperature is None else body.temperature,
        top_p=1.0 if body.top_p is None else body.top_p,
        top_k=-1 if body.top_k is None else body.top_k,
        seed=None if body.seed is None else body.seed + index,
        stop=body.stop_list(),
        stop_token_ids=body.stop_token_ids or [],
        include_stop_str_in_output=body.include_stop_str_in_output,
        ignore_eos=body.ignore_eos,
    )


def _sglang_sampling(params: dict[str, Any], max_tokens: int) -> SamplingRequest:
    stop = params.get("stop") or []
    return SamplingRequest(
        max_tokens=max_tokens,
        temperature=params.get("temperature", 1.0),
        top_p=params.get("top_p", 1.0),
        top_k=params.get("top_k", -1),
        seed=params.get("sampling_seed", params.get("seed")),
        stop=[stop] if isinstance(stop, str) else list(stop),
        stop_token_ids=params.get("stop_token_ids") or [],
        include_stop_str_in_output=bool(params.get("no_stop_trim", False)),
        ignore_eos=bool(params.get("ignore_eos", False)),
    )


def _chat_prompt(tokenizer: ChatTokenizer, body: ChatCompletionRequest) -> list[int]:
    if body.continue_final_message:
        # Continue the last (assistant) message: render it closed, then cut the end-of-turn off.
        text = tokenizer.render(body.messages, body.tools, add_generation_prompt=False)
        cut = text.rfind(tokenizer.eot_token)
        return tokenizer.encode(text[:cut] if cut >= 0 else text)
    return tokenizer.apply_chat_template(body.messages, body.tools, body.add_generation_prompt)


async def _chat_stream(
    engine: Engine,
    body: ChatCompletionRequest,
    prompt_ids: list[int],
    sampling: SamplingRequest,
    parse_tools: bool,
) -> AsyncIterator[str]:
    """vLLM-style SSE: role chunk (with prompt_token_ids), one chunk per token, finish chunk, usage, [DONE].
    Text after a `<tool_call>` is held back and sent as parsed tool calls in the finish chunk."""
    tokenizer = engine.tokenizer
    chunk_id, created = formats.new_id("chatcmpl"), int(time.time())

    def chunk(choice: dict[str, Any], **extra: Any) -> str:
        payload = {
            "id": chunk_id,
            "object": "chat.completion.chunk",
            "created": created,
            "model": engine.model_name,
            "choices": [choice] if choice else [],
            **extra,
        }
        return f"data: {json.dumps(payload, ensure_ascii=False)}\n\n"

    first: dict[str, Any] = {"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}
    yield chunk(first, **({"prompt_token_ids": prompt_ids} if body.return_token_ids else {}))
    sent = 0
    sample = Sample()
    async for released, sample in engine.stream(prompt_ids, sampling):
        ids = sample.token_ids[:released]
        shown = formats.visible_text(tokenizer, tokenizer.decode(ids), True)
        if parse_tools and "<tool_call>" in shown:
            shown = shown[: shown.index("<tool_call>")].rstrip("\n")
        delta_text = "" if shown.endswith("\ufffd") else shown[sent:]
        if delta_text:
            sent += len(delta_text)
        choice: dict[str, Any] = {"index": 0, "delta": {"content": delta_text} if delta_text else {}}
        choice["finish_reason"] = None
        if body.logprobs:
            values = sample.logprobs[released - 1 : released]
            as_ids = body.return_tokens_as_token_ids
            choice["logprobs"] = formats.chat_logprobs(tokenizer, ids[-1:], values, as_ids, body.top_logprobs)
        if body.return_token_ids:
            choice["token_ids"] = ids[-1:]
        yield chunk(choice)
    message, finish = formats.assistant_message(tokenizer, sample, parse_tools)
    delta: dict[str, Any] = {}
    if message["tool_calls"]:
        delta["tool_calls"] = [{"index": i, **call} for i, call in enumerate(message["tool_calls"])]
    else:
        rest = (message["content"] or "")[sent:]
        if rest:
            delta["content"] = rest
    yield chunk({"index": 0, "delta": delta, "finish_reason": finish, "stop_reason": sample.stop_reason})
    if body.stream_options and body.stream_options.include_usage:
        yield chunk({}, usage=formats.usage(len(prompt_ids), len(sample.token_ids)))
    yield "data: [DONE]\n\n"
