"""An inference backend that misbehaves on demand, served by uvicorn in this process on a free port:
answers whatever JSON a test sets, drips its answer a byte at a time, hangs, or redirects."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, RedirectResponse, Response, StreamingResponse
from starlette.routing import Route

from farm.embedded_redis import free_port
from tests.waiting import wait_until

GOOD = {
    "choices": [
        {
            "text": "hi",
            "finish_reason": "stop",
            "token_ids": [5, 6],
            "logprobs": {"tokens": ["token_id:5", "token_id:6"], "token_logprobs": [-0.1, -0.2]},
        }
    ],
    "usage": {"prompt_tokens": 3},
}
"""A well-formed vLLM /v1/completions answer: two sampled tokens with their logprobs."""


PROBE_PATHS = frozenset({"/health", "/v1/models"})


@dataclass
class Behaviour:
    mode: str = "json"
    """json: answer `reply`; drip: the reply a byte every `drip_s`; hang: no answer; redirect: 307 to `to`."""
    reply: Any = None
    drip_s: float = 0.5
    to: str = ""
    calls: int = 0
    open_calls: int = 0
    log: list[str] = field(default_factory=list)
    probes_ok: bool = True
    """The farm's registration probe (GET /health, GET /v1/models) is answered well and not counted: the
    scenarios are a backend that looks healthy and misbehaves on generation."""


class MisbehavingBackend:
    def __init__(self) -> None:
        self.behaviour = Behaviour()
        self.port = free_port()
        routes = [Route("/{path:path}", self._answer, methods=["GET", "POST"])]
        self.server = uvicorn.Server(
            uvicorn.Config(
                Starlette(routes=routes),
                host="127.0.0.1",
                port=self.port,
                log_level="warning",
                timeout_graceful_shutdown=1,
            )
        )
        self.thread = threading.Thread(target=self.server.run, name="misbehaving-backend", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    async def _answer(self, request: Request) -> Response:
        b = self.behaviour
        if b.probes_ok and request.method == "GET" and request.url.path in PROBE_PATHS:
            return JSONResponse({"object": "list", "data": []})
        b.calls += 1
        b.log.append(request.url.path)
        if b.mode == "redirect":
            return RedirectResponse(b.to, status_code=307)
        if b.mode == "hang":
            b.open_calls += 1
            try:
                await asyncio.sleep(3600)  # the scenario: a backend that never answers
            finally:
                b.open_calls -= 1
        if b.mode == "drip":
            return StreamingResponse(self._drip(JSONResponse(b.reply).body), media_type="application/json")
        return JSONResponse(b.reply)

    async def _drip(self, body: bytes) -> AsyncIterator[bytes]:
        self.behaviour.open_calls += 1
        try:
            for i in range(len(body)):
                yield body[i : i + 1]
                await asyncio.sleep(self.behaviour.drip_s)  # the scenario: a byte per drip_s
        finally:
            self.behaviour.open_calls -= 1

    def __enter__(self) -> MisbehavingBackend:
        self.thread.start()
        wait_until(lambda: self.server.started, 10, what="the misbehaving backend to start")
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)


def serve() -> Iterator[MisbehavingBackend]:
    with MisbehavingBackend() as backend:
        yield backend
