"""The gateway ASGI router: provider-shaped model endpoints per session, and the session API.

`router` carries its `/gateway` prefix: the API includes it as is; `create_gateway_app()` serves it alone
(`farm gateway`). Without installed services (`gateway_lifespan`) they are created from settings on first use.
"""

from __future__ import annotations

import asyncio
import json
import logging
import secrets
import time
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any, Literal, TypeVar

import redis
from fastapi import APIRouter, Depends, FastAPI, HTTPException, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, Field

from farm import tracing
from farm.agent.versions import resolve_version
from farm.builders import CompletionRecord, CompletionTimings, build_traces, builder_names
from farm.builders.records import CallFailure
from farm.gateway.backends import BackendSource
from farm.gateway.call_spans import trace_call
from farm.gateway.errors import ErrorKind, GatewayError
from farm.gateway.fast_path import FastRoutes, ModelCallFastPath
from farm.gateway.normalized import ChatCompletion, ChatRequest, ToolCall
from farm.gateway.providers import (
    ANTHROPIC,
    GOOGLE,
    OPENAI_CHAT,
    OPENAI_RESPONSES,
    PROVIDERS,
    RequestError,
    detect_provider,
)
from farm.gateway.providers.base import StreamEncoder
from farm.gateway.providers.google_genai import StreamEncoder as GoogleStreamEncoder
from farm.gateway.services import GatewayServices, gateway_lifespan, get_services
from farm.gateway.sessions import NoCompletion, SessionInfo, SessionNotFound
from farm.gateway.streaming import StreamAssembler, UpstreamStream
from farm.gateway.upstream import ForwardResult
from farm.models import BackendInfo, Trace
from farm.web.responses import errors
from farm.web.security import require_token

logger = logging.getLogger(__name__)

# Session metadata keys that steer the gateway rather than describe the rollout.
_CONTROL_KEYS = ("model", "sampling_params", tracing.TRACEPARENT)


router = APIRouter(prefix="/gateway", responses=errors(404, 413))
management = [Depends(require_token)]


class CreateSessionRequest(BaseModel):
    task_id: str | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    """Copied onto traces. `model` pins the served model, `sampling_params` override the harness's."""


class CreateSessionResponse(BaseModel):
    session_id: str
    base_url: str


class RewardRequest(BaseModel):
    reward: float
    completion_id: str | None = None


class ExportRequest(BaseModel):
    builder: str = "per_request"
    discount: float | None = Field(None, ge=0.0, le=1.0)
    style: Literal["individual", "concat"] | None = None
    """AReaL name for the builder (`individual` = per_request, `concat` = prefix_merging); wins if given."""
    config: dict[str, Any] = Field(default_factory=dict)


class ExportResponse(BaseModel):
    traces: list[Trace]
    failed_calls: list[dict[str, Any]] = Field(default_factory=list)
    """Model calls that produced no completion ({class, status, provider, at, completion_id, message});
    also in every trace's metadata when there are any."""


@contextmanager
def _known(session_id: str) -> Iterator[None]:
    """A management route's answer to a session id the store does not hold: 404."""
    try:
        yield
    except SessionNotFound:
        raise HTTPException(status_code=404, detail=f"unknown session {session_id!r}") from None


async def _session(services: GatewayServices, session_id: str) -> SessionInfo:
    with _known(session_id):
        return await services.store.get(session_id)


@router.post("/sessions", dependencies=management, responses=errors(401))
async def create_session(
    body: CreateSessionRequest, request: Request, services: GatewayServices = Depends(get_services)
) -> CreateSessionResponse:
    info = await services.store.create(task_id=body.task_id, metadata=body.metadata)
    return CreateSessionResponse(
        session_id=info.session_id, base_url=f"{str(request.url).rstrip('/')}/{info.session_id}"
    )


@router.get("/sessions/{session_id}", dependencies=management, responses=errors(401))
async def get_session(session_id: str, services: GatewayServices = Depends(get_services)) -> dict[str, Any]:
    info = await _session(services, session_id)
    count, failures = await asyncio.gather(
        services.store.completion_count(session_id), services.store.failures(session_id)
    )
    return {**info.model_dump(), "completion_count": count, "failed_call_count": len(failures)}


@router.post("/sessions/{session_id}/reward", dependencies=management, responses=errors(401, 409))
async def set_reward(
    session_id: str, body: RewardRequest, services: GatewayServices = Depends(get_services)
) -> dict[str, Any]:
    await _session(services, session_id)
    completion_id = body.completion_id
    if completion_id:  # accept the id as a provider showed it (msg_..., resp_...)
        for prefix in ("msg_", "resp_"):
            completion_id = completion_id.removeprefix(prefix)
    try:
        rewarded = await services.store.set_reward(session_id, body.reward, completion_id)
    except NoCompletion as exc:
        raise HTTPException(status_code=404 if body.completion_id else 409, detail=str(exc)) from None
    return {"ok": True, "completion_id": rewarded}


@router.post("/sessions/{session_id}/end", dependencies=management, responses=errors(401))
async def end_session(session_id: str, services: GatewayServices = Depends(get_services)) -> dict[str, int]:
    with _known(session_id):
        count = await services.store.end(session_id)
    await services.backends.release(session_id)
    return {"completion_count": count}


@router.get("/sessions/{session_id}/completions", dependencies=management, responses=errors(401))
async def list_completions(
    session_id: str, services: GatewayServices = Depends(get_services)
) -> list[CompletionRecord]:
    with _known(session_id):
        return await services.store.completions(session_id)


@router.post("/sessions/{session_id}/export", dependencies=management, responses=errors(401))
async def export_session(
    session_id: str, body: ExportRequest | None = None, services: GatewayServices = Depends(get_services)
) -> ExportResponse:
    body = body or ExportRequest()
    info = await _session(services, session_id)
    records, failures = await asyncio.gather(
        services.store.completions(session_id), services.store.failures(session_id)
    )
    failed_calls = [f.error.summary(f) for f in failures if f.error is not None]
    strategy = body.style or body.builder
    metadata = {k: v for k, v in info.metadata.items() if k not in _CONTROL_KEYS}
    metadata.update(session_id=session_id, task_id=info.task_id)
    if failed_calls:
        metadata["failed_calls"] = failed_calls
    if strategy not in builder_names():
        field = "style" if body.style else "builder"
        raise _invalid(field, f"unknown builder {strategy!r}; builders: {', '.join(builder_names())}")
    try:
        traces = build_traces(strategy, records, discount=body.discount, metadata=metadata, **body.config)
    except TypeError:
        raise _invalid(
            "config", f"options not understood by the {strategy} builder: {sorted(body.config)}"
        ) from None
    except ValueError as exc:
        raise _invalid("config", str(exc)) from None
    return ExportResponse(traces=traces, failed_calls=failed_calls)


def _invalid(field: str, message: str) -> RequestValidationError:
    """A 422 in FastAPI's own shape (a list naming the field), like every other validation error."""
    return RequestValidationError(
        [{"type": "value_error", "loc": ("body", field), "msg": message, "input": None}]
    )


# ---- model endpoints -------------------------------------------------------------------------------------


def _error(provider: str, error: GatewayError) -> JSONResponse:
    return JSONResponse(PROVIDERS[provider].render_error(error), status_code=error.status)


# The model-call routes (the path after the session id) with their provider and endpoint name: the one
# list, which declares the routes (below) and picks a call's provider. Google's take `{model}:{action}`.
_PROVIDER_ROUTES = {
    "v1/chat/completions": (OPENAI_CHAT, "openai_chat_completions"),
    "v1/responses": (OPENAI_RESPONSES, "openai_responses"),
    "v1/messages": (ANTHROPIC, "anthropic_messages"),
}
# google-genai 3.6 (google/genai/_api_client.py, GOOGLE_AI_API_DEFAULT_VERSION = 'v1') calls /v1/ unless told
# `api_version="v1beta"`; gemini-cli pins v1beta. Both are served by one handler.
_GOOGLE_ROUTES = ("v1beta/models/", "v1/models/")


def _route_provider(route: str) -> str:
    """The provider of the model-call `route` (as in `model_call`); a route of no provider is an error."""
    if route in _PROVIDER_ROUTES:
        return _PROVIDER_ROUTES[route][0]
    if route.startswith(_GOOGLE_ROUTES):
        return GOOGLE
    raise LookupError(f"{route!r} is not a model-call route")


def provider_error(route: str, error: GatewayError) -> JSONResponse:
    """`error` in the shape of the provider whose `route` (as in `model_call`) was called."""
    return _error(_route_provider(route), error)


async def _parse(
    request: Request,
    services: GatewayServices,
    session_id: str,
    provider: str,
    model: str | None,
    info: SessionInfo | None = None,
) -> tuple[SessionInfo, ChatRequest]:
    if info is None:
        try:
            info = await services.store.get(session_id)
        except SessionNotFound:
            raise GatewayError(
                ErrorKind.not_found, f"session {session_id!r} was never issued or has expired"
            ) from None
    try:
        body = json.loads(await request.body())
        if not isinstance(body, dict):
            raise RequestError("the request body must be a JSON object")
        return info, PROVIDERS[provider].parse_request(body, model)
    except (json.JSONDecodeError, RequestError, KeyError, TypeError, AttributeError) as exc:
        raise GatewayError(ErrorKind.invalid_request, f"cannot read the request: {exc}") from None


def _record(
    completion_id: str,
    session_id: str,
    provider: str,
    chat: ChatRequest,
    served: ForwardResult,
    started_at: float,
    total_s: float,
) -> CompletionRecord:
    reply = served.reply
    version, source = resolve_version(reply.weight_version, served.registered_version)
    return CompletionRecord(
        completion_id=completion_id,
        session_id=session_id,
        provider=provider,
        model=chat.model,
        request_messages=chat.messages,
        tools=chat.tools,
        prompt_ids=reply.prompt_ids,
        response_ids=reply.response_ids,
        response_logprobs=reply.response_logprobs,
        finish_reason=reply.completion.finish_reason,
        response_message=reply.completion.assistant_message(),
        backend=served.backend,
        policy_version=version,
        policy_version_source=source,
        timings=CompletionTimings(started_at=started_at, upstream_s=served.upstream_s, total_s=total_s),
        usage={
            "prompt_tokens": reply.completion.usage.prompt_tokens,
            "completion_tokens": reply.completion.usage.completion_tokens,
        },
        metadata={
            "served_model": reply.served_model,
            "attempts": served.attempts,
            "stream": chat.stream,
            "capture_problem": reply.capture_problem,
        },
    )


# Failures that concern the session itself (unknown, ended), not a model call: not logged as failed calls.
_NOT_CALL_FAILURES = (ErrorKind.not_found, ErrorKind.conflict, ErrorKind.unauthorized)


@dataclass
class _Failure:
    services: GatewayServices
    session_id: str
    provider: str
    completion_id: str
    started_at: float
    info: SessionInfo | None = None

    async def record(self, error: GatewayError, chat: ChatRequest | None) -> None:
        """Log a failed model call in the session's failure log, so an export shows it by its class."""
        if error.kind in _NOT_CALL_FAILURES:
            return
        record = CompletionRecord(
            completion_id=self.completion_id,
            session_id=self.session_id,
            provider=self.provider,
            model=chat.model if chat else None,
            request_messages=chat.messages if chat else [],
            tools=chat.tools if chat else [],
            timings=CompletionTimings(started_at=self.started_at, total_s=time.time() - self.started_at),
            error=CallFailure(error_class=error.kind.value, status=error.status, message=error.message),
        )
        trace_call(self.info, record)
        try:
            await self.services.store.append_failure(record)
        except redis.RedisError:  # the client still gets its error; the log is best effort
            logger.warning("could not log a failed call of session %s", self.session_id, exc_info=True)


async def _session_and_backend(
    services: GatewayServices, session_id: str
) -> tuple[SessionInfo, BackendInfo | None]:
    cached = services.store.cached(session_id)
    if cached is not None:
        return cached, None  # the forwarder acquires, overlapped with the call to the remembered pin
    # Reading the session and taking its (sticky) backend are independent: one round trip, not two.
    found, backend = await asyncio.gather(
        services.store.get(session_id), services.backends.acquire(session_id), return_exceptions=True
    )
    if isinstance(found, SessionNotFound):
        if isinstance(backend, BackendInfo):
            await services.backends.release(session_id)  # no pin for an id that was never issued
        raise GatewayError(ErrorKind.not_found, f"session {session_id!r} was never issued or has expired")
    if isinstance(found, BaseException):
        raise found
    if isinstance(backend, BaseException):
        raise backend
    return found, backend


EncoderFactory = Callable[[ChatCompletion, ChatRequest], StreamEncoder]


async def _model_call(
    request: Request,
    services: GatewayServices,
    session_id: str,
    provider: str,
    model: str | None = None,
    stream: bool | None = None,
    encoder: EncoderFactory | None = None,
    media_type: str = "text/event-stream",
) -> Response:
    started_at = time.time()
    started = time.perf_counter()
    completion_id = f"cmpl-{secrets.token_hex(12)}"
    chat: ChatRequest | None = None
    info: SessionInfo | None = None
    try:
        info, backend = await _session_and_backend(services, session_id)
        info, chat = await _parse(request, services, session_id, provider, model, info)
        if stream is not None:
            chat.stream = stream
        if info.state == "ended":
            await services.backends.release(session_id)  # /end gave the pin back; this call took it again
            raise GatewayError(ErrorKind.conflict, f"session {session_id!r} has ended")
        if chat.stream:
            upstream = await services.forwarder.open_stream(info, chat, backend)
            make = encoder or PROVIDERS[provider].stream_encoder
            frames = _relay(
                services, upstream, make, chat, completion_id, info, provider, started_at, started
            )
            return StreamingResponse(
                frames,
                media_type=media_type,
                headers={"cache-control": "no-cache"},
            )
        result = await services.forwarder.complete(info, chat, completion_id, backend)
        reply = result.reply
        record = _record(
            completion_id, session_id, provider, chat, result, started_at, time.perf_counter() - started
        )
        await services.keep(record)  # no 200 without its record
        trace_call(info, record)
    except (GatewayError, redis.RedisError) as exc:
        error = _unavailable(exc) if isinstance(exc, redis.RedisError) else exc
        failure = _Failure(services, session_id, provider, completion_id, started_at, info)
        await failure.record(error, chat)
        return _error(provider, error)
    return JSONResponse(PROVIDERS[provider].render_response(reply.completion, chat))


def _unavailable(exc: redis.RedisError) -> GatewayError:
    """The farm's Redis failed the call (unreachable, or no free connection within the pool's wait)."""
    message = f"the farm's Redis did not answer ({type(exc).__name__}); retry shortly"
    return GatewayError(ErrorKind.unavailable, message)


async def _relay(
    services: GatewayServices,
    upstream: UpstreamStream,
    make: EncoderFactory,
    chat: ChatRequest,
    completion_id: str,
    info: SessionInfo,
    provider: str,
    started_at: float,
    started: float,
) -> AsyncIterator[str]:
    """Provider frames as the backend's chunks arrive; the completion is recorded before the final frames."""
    encoder: StreamEncoder | None = None
    held: list[str] = []
    """The opening frames: made off the critical path, sent with the first event (failover stays unseen)."""
    head_of: StreamAssembler | None = None
    try:
        try:
            async for events in upstream.events():
                if head_of is not upstream.assembler and (encoder is None or held):  # a backend's first chunk
                    head_of, encoder = upstream.assembler, _stream_head(make, upstream, chat, completion_id)
                    held = encoder.start()
                if not events or encoder is None:
                    continue
                frames, held = held, []
                for event in events:
                    if isinstance(event, ToolCall):
                        frames += encoder.tool_call(event)
                    else:
                        frames += encoder.text(*event)
                yield "".join(frames)
            reply = upstream.reply(completion_id)
        finally:
            await upstream.aclose()
        served = upstream.result(reply)
        record = _record(
            completion_id, info.session_id, provider, chat, served, started_at, time.perf_counter() - started
        )
        await services.keep(record)  # before the final frames: a stream ends finished only when recorded
        trace_call(info, record)
    except (GatewayError, redis.RedisError) as exc:  # the stream's failures, judged by the policy
        error = _unavailable(exc) if isinstance(exc, redis.RedisError) else exc
        failure = _Failure(services, info.session_id, provider, completion_id, started_at, info)
        await failure.record(error, chat)
        if encoder is None:
            encoder = make(ChatCompletion(id=completion_id, model=chat.model), chat)
            held = encoder.start()
        yield "".join([*held, *encoder.error(error)])
        return
    if encoder is None:  # a stream without a chunk
        encoder = _stream_head(make, upstream, chat, completion_id)
        held = encoder.start()
    yield "".join([*held, *encoder.finish(reply.completion)])


def _stream_head(
    make: EncoderFactory, upstream: UpstreamStream, chat: ChatRequest, completion_id: str
) -> StreamEncoder:
    head = ChatCompletion(id=completion_id, model=upstream.assembler.model)
    head.usage.prompt_tokens = len(upstream.assembler.prompt_ids)
    return make(head, chat)


async def model_call(request: Request, services: GatewayServices, session_id: str, route: str) -> Response:
    """Serve one model call; `route` is the path after the session id (`v1/chat/completions`, ...).
    Shared by the FastAPI routes below and the ASGI fast path (farm/gateway/fast_path.py)."""
    provider = _route_provider(route)
    if provider != GOOGLE:
        return await _model_call(request, services, session_id, provider)
    return await _google(request, services, session_id, route.rpartition("/")[2])


async def _fast_model_call(request: Request, session_id: str, route: str) -> Response:
    try:
        return await model_call(request, await get_services(request), session_id, route)
    except (redis.ConnectionError, redis.TimeoutError) as exc:
        # What the API's exception handler answers on the routed path: retryable, not a 500.
        message = f"the farm's Redis is unreachable ({type(exc).__name__}); retry shortly"
        return provider_error(route, GatewayError(ErrorKind.unavailable, message))


EndpointT = TypeVar("EndpointT", bound=Callable[..., Any])
_SERVED_FAST: set[Callable[..., Any]] = set()


def served_fast(endpoint: EndpointT) -> EndpointT:
    """Marks a model-call route (one that only calls `model_call` with its path after the session id) for
    the fast path, which finds it in this router's routes."""
    _SERVED_FAST.add(endpoint)
    return endpoint


model_route = FastRoutes(router.routes, lambda route: route.endpoint in _SERVED_FAST)
"""(session id, route) when a request is one of the model calls the fast path serves."""


def install_fast_path(app: FastAPI) -> None:
    """Serve the model calls ahead of FastAPI's routing (farm/gateway/fast_path.py); call it before adding
    the app's other middleware, so that they wrap it."""
    app.add_middleware(ModelCallFastPath, handle=_fast_model_call, routes=model_route)


def _provider_route(route: str, name: str) -> None:
    """Declares the model-call route `route` of _PROVIDER_ROUTES, served by the fast path."""

    async def endpoint(
        session_id: str, request: Request, services: GatewayServices = Depends(get_services)
    ) -> Response:
        return await model_call(request, services, session_id, route)

    endpoint.__name__ = endpoint.__qualname__ = name
    router.post(f"/sessions/{{session_id}}/{route}", name=name)(served_fast(endpoint))


for _route, (_, _name) in _PROVIDER_ROUTES.items():
    _provider_route(_route, _name)


async def _count_tokens(
    request: Request, services: GatewayServices, session_id: str, provider: str, model: str | None
) -> Response:
    try:
        info, chat = await _parse(request, services, session_id, provider, model)
        count, exact = await services.forwarder.count_tokens(info, chat)
    except GatewayError as error:
        return _error(provider, error)
    payload = {"input_tokens": count} if provider == ANTHROPIC else {"totalTokens": count}
    return JSONResponse(payload, headers={"x-farm-token-count": "exact" if exact else "estimate"})


@router.post("/sessions/{session_id}/v1/messages/count_tokens")
async def anthropic_count_tokens(
    session_id: str, request: Request, services: GatewayServices = Depends(get_services)
) -> Response:
    return await _count_tokens(request, services, session_id, ANTHROPIC, None)


def _google_encoder(alt_sse: bool) -> EncoderFactory:
    def make(head: ChatCompletion, chat: ChatRequest) -> StreamEncoder:
        return GoogleStreamEncoder(head, chat, sse=alt_sse)

    return make


@served_fast
async def google_generate(
    session_id: str, model_action: str, request: Request, services: GatewayServices = Depends(get_services)
) -> Response:
    return await _google(request, services, session_id, model_action)


for _prefix in _GOOGLE_ROUTES:
    router.post(f"/sessions/{{session_id}}/{_prefix}{{model_action}}")(google_generate)


async def _google(
    request: Request, services: GatewayServices, session_id: str, model_action: str
) -> Response:
    model, _, action = model_action.rpartition(":")
    if action == "generateContent":
        return await _model_call(request, services, session_id, GOOGLE, model, stream=False)
    if action == "streamGenerateContent":
        alt_sse = request.query_params.get("alt") == "sse"
        return await _model_call(
            request,
            services,
            session_id,
            GOOGLE,
            model,
            stream=True,
            encoder=_google_encoder(alt_sse),
            media_type="text/event-stream" if alt_sse else "application/json",
        )
    if action == "countTokens":
        return await _count_tokens(request, services, session_id, GOOGLE, model)
    return _error(GOOGLE, GatewayError(ErrorKind.not_found, f"unknown method {action!r}"))


@router.get("/sessions/{session_id}/v1/models")
async def list_models(session_id: str, services: GatewayServices = Depends(get_services)) -> Response:
    try:
        info = await services.store.get(session_id)
    except SessionNotFound:
        return _error(
            OPENAI_CHAT, GatewayError(ErrorKind.not_found, f"session {session_id!r} was never issued")
        )
    name = str(info.metadata.get("model") or "default")
    return JSONResponse(
        {"object": "list", "data": [{"id": name, "object": "model", "owned_by": "rollout-farm"}]}
    )


@router.post("/sessions/{session_id}/{rest:path}")
async def detected_provider_call(
    session_id: str, rest: str, request: Request, services: GatewayServices = Depends(get_services)
) -> Response:
    """Paths that differ from the canonical ones (no `/v1`, doubled `/v1/v1`): detect the provider."""
    try:
        body = json.loads(await request.body() or b"null")
    except json.JSONDecodeError:
        body = None
    provider = detect_provider("/" + rest, request.headers, body)
    return await _model_call(request, services, session_id, provider)


def create_gateway_app(
    redis_url: str | None = None, backends: BackendSource | None = None, upstream_timeout_s: float = 600.0
) -> FastAPI:
    """The gateway alone: `/gateway/...` plus `/healthz`. Without `backends`, the farm's Redis pool."""

    @asynccontextmanager
    async def lifespan(app: FastAPI):  # type: ignore[no-untyped-def]
        services = GatewayServices.create(redis_url, backends, upstream_timeout_s=upstream_timeout_s)
        async with gateway_lifespan(app, services):
            yield

    app = FastAPI(title="rollout-farm model gateway", lifespan=lifespan)
    app.include_router(router)
    install_fast_path(app)

    @app.get("/healthz")
    async def healthz(request: Request) -> dict[str, bool]:
        await request.app.state.gateway.redis.ping()
        return {"ok": True}

    return app
