"""The reference LLM server as a FastAPI app: the vLLM subset the farm speaks, plus SGLang's /generate;
`emulate` picks whose validation, errors and OpenAI reply shapes it has. One function per route group."""

from __future__ import annotations

import json
import time
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse

from farm.chat.tokenizer import ChatTokenizer
from farm.llm import chat_formats, emulation, formats, weights
from farm.llm.config import Emulated, ServerConfig
from farm.llm.engine import ContextWindowExceeded, Engine
from farm.llm.policies import make_policy
from farm.llm.protocol import (
    ChatCompletionRequest,
    CompletionRequest,
    DetokenizeRequest,
    GenerateRequest,
    TokenizeRequest,
)
from farm.llm.sampling import SamplingRequest


def create_app(config: ServerConfig | None = None, **overrides: Any) -> FastAPI:
    """Build the app in-process; `overrides` set ServerConfig fields (e.g. policy="tiny")."""
    config = (config or ServerConfig()).model_copy(update=overrides)
    ServerConfig.model_validate(config.model_dump())  # overrides are checked like flags
    tokenizer = ChatTokenizer.load(config.tokenizer)
    engine = Engine(config, tokenizer, make_policy(config, tokenizer))
    app = FastAPI(title=f"rollout-farm reference LLM server (as {config.emulate})")
    app.state.engine = engine
    app.add_exception_handler(RequestValidationError, _invalid_request(config.emulate))
    _add_info_routes(app, engine)
    _add_tokenizer_routes(app, engine)
    _add_completion_route(app, engine)
    _add_chat_route(app, engine)
    _add_generate_route(app, engine)
    weights.add_weight_routes(app, engine)
    return app


def _invalid_request(emulate: Emulated) -> Any:
    async def handler(request: Request, exc: Exception) -> JSONResponse:
        assert isinstance(exc, RequestValidationError)
        message = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        if request.url.path == "/generate":
            return JSONResponse(emulation.generate_error(message), status_code=400)
        return JSONResponse(emulation.openai_error(emulate, message), status_code=400)

    return handler


def _refusal(engine: Engine, exc: Exception) -> JSONResponse:
    """A 400 from an OpenAI route, in the emulated server's error shape."""
    param = exc.param if isinstance(exc, ContextWindowExceeded) else None
    return JSONResponse(emulation.openai_error(engine.config.emulate, str(exc), param), status_code=400)


def _add_info_routes(app: FastAPI, engine: Engine) -> None:
    @app.get("/health")
    async def health() -> Response:
        return Response(status_code=200)

    @app.get("/version", response_model=None)
    async def version() -> dict[str, str] | Response:
        """vLLM's /version (SGLang has none)."""
        if engine.config.emulate != "vllm":
            return JSONResponse({"detail": "Not Found"}, status_code=404)
        return {"version": emulation.VLLM_VERSION}

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        card = {
            "id": engine.model_name,
            "object": "model",
            "created": int(time.time()),
            "owned_by": "sglang" if engine.config.emulate == "sglang" else "vllm",
            "root": engine.model_name,
            "max_model_len": engine.config.max_model_len,
        }
        return {"object": "list", "data": [card]}


def _add_tokenizer_routes(app: FastAPI, engine: Engine) -> None:
    tokenizer, config = engine.tokenizer, engine.config

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
        # vLLM answers {"prompt"}; SGLang's DetokenizeResponse is {"text"}.
        key = "text" if config.emulate == "sglang" else "prompt"
        return {key: tokenizer.decode(body.tokens)}


def _add_completion_route(app: FastAPI, engine: Engine) -> None:
    @app.post("/v1/completions", response_model=None)
    async def completions(body: CompletionRequest) -> dict[str, Any] | JSONResponse:
        if unknown := _unknown_model(engine, body.model):
            return unknown
        if body.stream:
            return _refusal(engine, ValueError("stream is not supported on /v1/completions"))
        try:
            choices, prompt_total, completion_total = await _complete(engine, body)
        except ValueError as exc:
            return _refusal(engine, exc)
        return formats.completion_response(engine.model_name, choices, prompt_total, completion_total)


async def _complete(engine: Engine, body: CompletionRequest) -> tuple[list[dict[str, Any]], int, int]:
    """Every choice of a /v1/completions request (n per prompt), and the prompt and completion
    tokens it used."""
    tokenizer = engine.tokenizer
    choices: list[dict[str, Any]] = []
    prompt_total = completion_total = 0
    for p, prompt in enumerate(body.prompts()):
        prompt_ids = tokenizer.encode(prompt) if isinstance(prompt, str) else list(prompt)
        max_tokens = engine.resolve_max_tokens(len(prompt_ids), body.max_tokens)
        for j in range(body.n):
            sample = await engine.generate(prompt_ids, _sampling(body, max_tokens, j))
            choice = formats.completion_choice(
                tokenizer,
                p * body.n + j,
                prompt_ids,
                sample,
                logprobs=body.logprobs,
                return_token_ids=body.return_token_ids,
                as_ids=body.return_tokens_as_token_ids and engine.config.emulate == "vllm",
                skip_special_tokens=body.skip_special_tokens,
            )
            if engine.config.emulate == "sglang":
                # SGLang's CompletionResponseChoice (protocol.py @ 004c82e07d87): matched_stop, no
                # prompt_logprobs; its logprob tokens are text (it has no return_tokens_as_token_ids).
                del choice["prompt_logprobs"]
                stop = choice.pop("stop_reason")
                choice["matched_stop"] = formats.sglang_finish(sample).get("matched", stop)
            choices.append(choice)
            completion_total += len(sample.token_ids)
        prompt_total += len(prompt_ids)
    return choices, prompt_total, completion_total


def _add_chat_route(app: FastAPI, engine: Engine) -> None:
    @app.post("/v1/chat/completions", response_model=None)
    async def chat_completions(body: ChatCompletionRequest) -> Any:
        if unknown := _unknown_model(engine, body.model):
            return unknown
        emulate = engine.config.emulate
        try:
            if emulate == "sglang" and body.stream:
                chat_formats.refuse_sglang_stream_flags(body)
            prompt_ids = _chat_prompt(engine.tokenizer, body)
            requested = body.max_completion_tokens or body.max_tokens
            max_tokens = engine.resolve_max_tokens(len(prompt_ids), requested)
        except (ValueError, TypeError) as exc:
            return _refusal(engine, exc)
        parse_tools = body.tool_choice != "none"
        if body.stream:
            stream = chat_formats.chat_stream(
                engine, body, prompt_ids, _sampling(body, max_tokens, 0), parse_tools
            )
            return StreamingResponse(stream, media_type="text/event-stream")
        samples = [await engine.generate(prompt_ids, _sampling(body, max_tokens, j)) for j in range(body.n)]
        return chat_formats.chat_response(engine, body, prompt_ids, samples, parse_tools)


def _unknown_model(engine: Engine, model: str | None) -> JSONResponse | None:
    """vLLM answers a model it does not serve with 404 (SGLang ignores the field)."""
    if engine.config.emulate != "vllm" or model is None or model == engine.model_name:
        return None
    message = f"The model `{model}` does not exist. Valid aliases: {engine.model_name}."
    error = {"message": message, "type": "NotFoundError", "param": "model", "code": 404}
    return JSONResponse({"error": error}, status_code=404)


def _add_generate_route(app: FastAPI, engine: Engine) -> None:
    @app.post("/generate", response_model=None)
    async def generate(body: GenerateRequest) -> dict[str, Any] | JSONResponse:
        params = body.sampling_params
        try:
            prompt_ids = _generate_prompt(engine.tokenizer, body)
            max_tokens = _generate_budget(engine, len(prompt_ids), params)
            sampling = _sglang_sampling(params, max_tokens)
        except (ValueError, TypeError) as exc:
            return JSONResponse(emulation.generate_error(str(exc)), status_code=400)
        started = time.perf_counter()
        sample = await engine.generate(prompt_ids, sampling)
        answer = formats.sglang_response(
            engine.tokenizer,
            prompt_ids,
            sample,
            return_logprob=body.return_logprob,
            skip_special_tokens=bool(params.get("skip_special_tokens", True)),
            no_stop_trim=bool(params.get("no_stop_trim", False)),
            latency_s=time.perf_counter() - started,
        )
        answer["meta_info"]["weight_version"] = sample.weight_version
        return answer


def _generate_prompt(tokenizer: ChatTokenizer, body: GenerateRequest) -> list[int]:
    if body.stream:
        raise ValueError("stream is not supported on /generate")
    if body.input_ids is not None:
        return list(body.input_ids)
    if body.text is not None:
        return tokenizer.encode(body.text)
    raise ValueError("give `text` or `input_ids`")


def _generate_budget(engine: Engine, prompt_len: int, params: dict[str, Any]) -> int:
    """SGLang's SamplingParams is a msgspec Struct (kw_only): an argument it does not declare is a
    TypeError, answered 400. A missing budget is its default of 128 new tokens; an explicit null is
    clamped to the window by the scheduler."""
    unknown = sorted(set(params) - emulation.SGLANG_SAMPLING_PARAMS)
    if unknown:
        raise TypeError(f"Unexpected keyword argument '{unknown[0]}'")
    requested = params.get("max_new_tokens")
    if requested is not None and not isinstance(requested, int):
        raise ValueError(f"max_new_tokens must be an integer, got {requested!r}")
    budget = emulation.resolve_max_tokens("sglang", engine.config.max_model_len, prompt_len, requested)
    return budget if "max_new_tokens" in params else min(128, budget)


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
    messages = _arguments_as_objects(body.messages)
    if body.continue_final_message:
        # Continue the last (assistant) message: render it closed, then cut the end-of-turn off.
        text = tokenizer.render(messages, body.tools, add_generation_prompt=False)
        cut = text.rfind(tokenizer.eot_token)
        return tokenizer.encode(text[:cut] if cut >= 0 else text)
    return tokenizer.apply_chat_template(messages, body.tools, body.add_generation_prompt)


def _arguments_as_objects(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Assistant tool calls' arguments as objects, as vLLM hands them to the chat template (its
    _postprocess_messages, vllm/entrypoints/chat_utils.py @001eadcf: OpenAI clients send them as JSON
    text, and templates such as GLM's refuse text): JSON text becomes its value, anything else
    not an object or list becomes {}; an empty list of calls is dropped."""
    out: list[dict[str, Any]] = []
    for message in messages:
        calls = message.get("tool_calls")
        if message.get("role") != "assistant" or not isinstance(calls, list):
            out.append(message)
            continue
        fixed = {k: v for k, v in message.items() if k != "tool_calls"}
        if calls:
            fixed["tool_calls"] = [_call_with_object_arguments(call) for call in calls]
        out.append(fixed)
    return out


def _call_with_object_arguments(call: Any) -> Any:
    function = call.get("function") if isinstance(call, dict) else None
    if not isinstance(function, dict):
        return call
    arguments = function.get("arguments")
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments)
        except json.JSONDecodeError:
            arguments = {}
    elif not isinstance(arguments, (dict, list)):
        arguments = {}
    return {**call, "function": {**function, "arguments": arguments}}
