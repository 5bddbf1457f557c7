"""A recording proxy between the farm and a real server: every request is forwarded unchanged (loopback only)
and every completion exchange is kept, so a test compares what reached the trainer with what the server
itself answered."""

from __future__ import annotations

import json
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI, Request, Response

from farm.embedded_redis import free_port

HOP_HEADERS = {"host", "content-length", "transfer-encoding", "connection"}


@dataclass
class Exchange:
    path: str
    request: dict[str, Any]
    response: dict[str, Any]
    status: int


@dataclass
class Recording:
    exchanges: list[Exchange] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def completions(self) -> dict[tuple[int, ...], tuple[list[int], list[float], str | None]]:
        """/v1/completions by prompt ids: (token ids, logprobs, finish reason) the server sampled."""
        out: dict[tuple[int, ...], tuple[list[int], list[float], str | None]] = {}
        with self.lock:
            for ex in self.exchanges:
                if ex.path != "/v1/completions" or ex.status != 200:
                    continue
                prompt = ex.request.get("prompt")
                if not isinstance(prompt, list):
                    continue
                choice = ex.response["choices"][0]
                logprobs = (choice.get("logprobs") or {}).get("token_logprobs") or []
                out[tuple(prompt)] = (
                    list(choice.get("token_ids") or []),
                    list(logprobs),
                    choice.get("finish_reason"),
                )
        return out

    def chats(self) -> list[dict[str, Any]]:
        with self.lock:
            return [
                ex.response for ex in self.exchanges if ex.path == "/v1/chat/completions" and ex.status == 200
            ]


class RecordingProxy:
    def __init__(self, target_root: str) -> None:
        self.target = target_root.rstrip("/")
        self.recording = Recording()
        self.port = free_port()
        self.root = f"http://127.0.0.1:{self.port}"
        app = FastAPI()

        @app.api_route("/{path:path}", methods=["GET", "POST"])
        async def forward(path: str, request: Request) -> Response:
            body = await request.body()
            headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_HEADERS}
            async with httpx.AsyncClient(timeout=httpx.Timeout(900.0, connect=5.0)) as http:
                answer = await http.request(
                    request.method, f"{self.target}/{path}", params=request.query_params, content=body,
                    headers=headers,
                )  # fmt: skip
            self._record(f"/{path}", body, answer)
            kept = {
                k: v for k, v in answer.headers.items() if k.lower() not in HOP_HEADERS | {"content-encoding"}
            }
            return Response(answer.content, status_code=answer.status_code, headers=kept)

        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning")
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def _record(self, path: str, body: bytes, answer: httpx.Response) -> None:
        if path not in ("/v1/completions", "/v1/chat/completions"):
            return
        try:
            request, response = json.loads(body or b"{}"), answer.json()
        except ValueError:
            return  # a streamed reply: the non-streamed ones are what the checks read
        with self.recording.lock:
            self.recording.exchanges.append(Exchange(path, request, response, answer.status_code))

    def __enter__(self) -> RecordingProxy:
        self.thread.start()
        deadline = time.monotonic() + 30
        while not self.server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("the recording proxy did not start")
            time.sleep(0.05)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(10)
