"""The ASGI app: management and task APIs, metrics, and the model gateway, in one process."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from kombu.exceptions import OperationalError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

from farm import __version__
from farm.api import docs, management, metrics, publish, rollout, training_metrics
from farm.api.backend_health import probe_forever
from farm.api.callback_sender import CallbackSender
from farm.api.groups import settle_forever
from farm.api.invalid import invalid_request
from farm.api.outage_guard import OutageGuard, RedisWatch
from farm.api.state import FarmState
from farm.api.strict_json import StrictJSONBody
from farm.background import stop_all
from farm.gateway.app import install_fast_path
from farm.gateway.app import router as gateway_router
from farm.gateway.services import GatewayServices, gateway_lifespan
from farm.logs import configure as configure_logging
from farm.memory import cap_malloc_arenas
from farm.outage import redis_outage
from farm.settings import Settings, get_settings
from farm.ui import routes as ui
from farm.web.security import BodySizeLimit


def _lifespan(settings: Settings) -> Callable[[FastAPI], contextlib.AbstractAsyncContextManager[None]]:
    """The API's background work: the result waiter, the backend prober, the callback sender, the group
    settler, the gateway."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        from farm.celery_app import app as celery

        state = FarmState.build(settings, celery)
        app.state.farm = state
        app.state.redis_watch = watch = RedisWatch.create(settings)
        await state.waiter.start()
        background = [
            asyncio.create_task(probe_forever(state.pool), name="backend prober"),
            asyncio.create_task(
                CallbackSender(state.store).run_forever(state.waiter.any_done, state.waiter.callbacks_due),
                name="callback sender",
            ),
            asyncio.create_task(settle_forever(state), name="group settler"),
        ]
        try:
            services = GatewayServices.create(redis=state.redis, backends=state.pool, settings=settings)
            async with gateway_lifespan(app, services):
                yield
        finally:
            await stop_all(background)
            await state.waiter.stop()
            await state.redis.aclose()
            await watch.aclose()

    return lifespan


def create_app(settings: Settings | None = None) -> FastAPI:
    settings = settings or get_settings()
    cap_malloc_arenas()  # before uvicorn's and anyio's threads exist (farm/memory.py)
    configure_logging()
    app = FastAPI(
        title="rollout-farm",
        version=__version__,
        description="Rollout-as-a-service for RL of multi-turn LLM agents (see docs/CONTRACT.md).",
        lifespan=_lifespan(settings),
        docs_url=None,  # served by farm.api.docs, behind the bearer token when one is set
        redoc_url=None,
        openapi_url=None,
    )
    install_fast_path(app)  # innermost: the size limit and JSON check still apply to model calls
    app.add_middleware(StrictJSONBody)  # inside the size limit: it reads whole bodies
    app.add_middleware(BodySizeLimit, max_bytes=settings.max_request_bytes)
    app.add_middleware(OutageGuard)  # outermost: a request Redis holds up answers 503 within a second

    app.add_exception_handler(RequestValidationError, invalid_request)

    @app.exception_handler(RedisConnectionError)
    @app.exception_handler(RedisTimeoutError)
    @app.exception_handler(OperationalError)
    async def redis_unreachable(request: Request, exc: Exception) -> JSONResponse:
        """Redis down past the clients' retries: a retryable 503, not a 500."""
        redis_outage.lost("api", exc)
        return JSONResponse(
            {"detail": f"the farm's Redis is unreachable ({type(exc).__name__}); retry shortly"},
            status_code=503,
            headers={"Retry-After": "5"},
        )

    app.include_router(docs.router)
    app.include_router(management.health_router)
    app.include_router(management.router)
    app.include_router(publish.router)
    app.include_router(rollout.router)
    app.include_router(metrics.router)
    app.include_router(training_metrics.router)
    app.include_router(gateway_router)  # carries its own /gateway prefix
    for router in (ui.public, ui.pages, ui.data):
        app.include_router(router)
    app.mount("/ui/static", ui.static_files, name="ui-static")
    return app
